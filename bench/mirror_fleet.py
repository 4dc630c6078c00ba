"""Many gateways followed into one PostgreSQL: lag and idle cost per gateway (issue 19).

For each of ``--gateways`` gateways, a ``sessions.db`` is written at ``--rate`` receipt
writes per second (each with one message before it), all at once, while the mirror follows
every one of them into one PostgreSQL database (``--database-url``, by default
``osq_h5_bench``, dropped and migrated first; a ``sqlite:///`` URL for the suite's smoke test):

- ``--writer reference`` (default): the reference ``SessionStorage`` (opensquilla 0.3.0,
  ``var/bench/ref-venv``, ``tests/mirror/reference_writer.py load --trace``), about 6 ms of
  CPU a write: ten gateways at 100/s need six cores for the writers alone;
- ``--writer light``: ``bench/light_writer.py``, plain sqlite3 transactions in the 0.3.0
  schema with its FTS5 triggers (taken from the golden ``sessions.db``), one transcript row
  and one receipt a write, a fraction of a millisecond of CPU: 10 x 100/s fits on 2 cores.

And how the mirror follows them:

- ``--mode processes`` (default): one ``import_opensquilla --follow --gateway gN`` process per
  gateway, so each gateway's CPU is its own process's;
- ``--mode threads``: one ``run_mirror`` process with ``OPENSQUILLA_SOURCES`` (the Procfile's
  way), one follower thread per gateway; the idle CPU per gateway is the process's divided by
  the number of gateways.

Figures, per gateway and over all of them:

1. Lag: each receipt's commit time (printed by its writer) to when it appears in our ledger
   under its gateway (this process polls PostgreSQL every 20 ms, so each figure includes up
   to 20 ms of polling): p50, p99, max; the writer's achieved rate.
   Beside it, each follower's CPU over the writing phase, as a share of one core.
2. Idle cost: CPU time of each follower (``/proc/<pid>/stat``) over ``--idle-seconds`` once
   every writer has stopped, as a share of one core.
3. CPU budget: the writers' CPU per write (``RUSAGE_CHILDREN`` over the writing phase) and the
   followers' per write applied, and the cores each side needs at the asked rate: a run whose
   writers alone need more cores than the machine has cannot produce the asked load, and says so.
4. Rows lost and duplicated: receipts committed upstream and never seen here, and per
   gateway the transcript entries and receipts here against the source file's own counts.
   The followers' CPU per row applied (``MirrorSource.rows_applied`` over the phase).
5. ``--long-session N`` (e.g. 30000): each gateway's session is then given N more transcript
   entries in one transaction, the followers catch up, and the lag phase runs again: the same
   figures at a long session, and the ratio of the followers' CPU per row to the short run's.

The 1-minute load average is sampled every second through both phases: the machine is
shared, so the figures are noisy and the result says how busy it was.

    .venv/bin/python bench/mirror_fleet.py [--gateways 10] [--rate 100] [--seconds 30]
        [--idle-seconds 30] [--mode processes|threads] [--writer reference|light]
        [--long-session 0] [--name mirror_fleet] [--work-dir DIR] [--result PATH]

Writes ``var/bench/<name>.json`` (``kind: mirror_fleet``); ``bench/report.py --adopt`` puts
it on docs/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from workload import machine_info, write_result  # noqa: E402

OUT = ROOT / "var" / "bench" / "mirror_fleet"
REF_PYTHON = ROOT / "var" / "bench" / "ref-venv" / "bin" / "python"
WRITER = ROOT / "tests" / "mirror" / "reference_writer.py"
LIGHT_WRITER = ROOT / "bench" / "light_writer.py"
PYTHON = ROOT / ".venv" / "bin" / "python"
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/osq_h5_bench"
LAG_GOAL_S = 2.0
IDLE_GOAL_PERCENT = 1.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class LoadSampler:
    """The 1-minute load average, once a second, per phase."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = {}
        self.phase = "setup"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.samples.setdefault(self.phase, []).append(round(os.getloadavg()[0], 2))

    def stop(self) -> dict[str, dict[str, float]]:
        self._stop.set()
        self._thread.join()
        return {
            phase: {"min": min(v), "max": max(v), "mean": round(sum(v) / len(v), 2)}
            for phase, v in self.samples.items()
            if v
        }


def reset_database(url: str) -> None:
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            leftover.unlink(missing_ok=True)
        return
    import psycopg

    name = url.rsplit("/", 1)[1]
    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def writer_command(writer: str, path: Path, *args: str) -> list[str]:
    if writer == "light":
        return [sys.executable, str(LIGHT_WRITER), str(path), *args]
    return [str(REF_PYTHON), str(WRITER), str(path), *args]


def fresh_source(path: Path, writer: str) -> None:
    """A sessions.db whose schema the reference itself created (one write), or the light
    writer's copy of the golden 0.3.0 schema (empty)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    args = ("create",) if writer == "light" else ("load", "--count", "1")
    subprocess.run(writer_command(writer, path, *args), check=True, capture_output=True)  # noqa: S603


def source_counts(path: Path) -> dict[str, int]:
    """The source file's own counts of the rows the mirror follows."""
    import sqlite3

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {
            "entries": conn.execute("SELECT count(*) FROM transcript_entries").fetchone()[0],
            "receipts": conn.execute("SELECT count(*) FROM memory_durable_receipts").fetchone()[0],
        }
    finally:
        conn.close()


def ledger_counts(gateway: str) -> dict[str, int]:
    """Our counts of the gateway's rows (every row, not distinct: a duplicate shows)."""
    from receipts_app.models import MemoryDurableReceipt
    from sessions_app.models import TranscriptEntry

    return {
        "entries": TranscriptEntry.objects.filter(gateway_id=gateway).count(),
        "receipts": MemoryDurableReceipt.objects.filter(gateway_id=gateway).count(),
    }


def rows_applied(gateways: list[str]) -> int:
    from receipts_app.mirror.models import MirrorSource

    return sum(
        MirrorSource.objects.filter(gateway_id__in=gateways).values_list("rows_applied", flat=True)
    )


def wait_caught_up(sources: dict[str, Path], timeout: float) -> None:
    """Until every gateway's entries and receipts here match its file's counts, and every
    follower has recorded the catch-up (a long pass commits its rows before it records the
    pass) and looked again to find nothing new (lag 0, docs/MIRROR.md "Lag"), so the next
    phase measures writes, not the rest of the catch-up."""
    from receipts_app.mirror.models import MirrorSource

    deadline = time.perf_counter() + timeout
    steady_since, last = None, None
    while time.perf_counter() < deadline:
        caught_up = all(ledger_counts(g) == source_counts(p) for g, p in sources.items())
        lags = MirrorSource.objects.filter(gateway_id__in=list(sources)).values_list(
            "lag_ms", flat=True
        )
        applied = rows_applied(list(sources))
        if caught_up and all(lag == 0 for lag in lags) and applied == last:
            steady_since = steady_since or time.perf_counter()
            if time.perf_counter() - steady_since >= 3:
                return
        else:
            steady_since = None
        last = applied
        time.sleep(0.5)
    raise SystemExit("the followers did not catch up with the prefilled sessions in time")


def lost_and_duplicated(
    sources: dict[str, Path], settle_s: float = 30.0
) -> dict[str, dict[str, int]]:
    """Per gateway: rows in the file missing here (lost) and rows here beyond it (duplicated),
    once the followers had up to ``settle_s`` to apply what the phase's last pass left: a pass
    reads entries before receipts, so a receipt seen may have its entry in the next pass."""
    deadline = time.perf_counter() + settle_s
    while time.perf_counter() < deadline and not all(
        ledger_counts(g) == source_counts(p) for g, p in sources.items()
    ):
        time.sleep(0.2)
    out = {}
    for gateway, path in sources.items():
        theirs, ours = source_counts(path), ledger_counts(gateway)
        out[gateway] = {
            f"{kind}_{word}": max(0, diff)
            for kind in ("entries", "receipts")
            for word, diff in (
                ("lost", theirs[kind] - ours[kind]),
                ("duplicated", ours[kind] - theirs[kind]),
            )
        }
    return out


def start_followers(
    mode: str, sources: dict[str, Path], env: dict[str, str], out: Path
) -> dict[str, subprocess.Popen[bytes]]:
    """gateway -> its follower process (in thread mode every gateway names the one process)."""
    if mode == "threads":
        entries = " ".join(f"{name}={path}" for name, path in sources.items())
        process = subprocess.Popen(  # noqa: S603 - fixed argv
            [str(PYTHON), str(ROOT / "manage.py"), "run_mirror"],
            cwd=ROOT,
            env={**env, "OPENSQUILLA_SOURCES": entries},
            stdout=(out / "run_mirror.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        return dict.fromkeys(sources, process)
    return {
        name: subprocess.Popen(  # noqa: S603 - fixed argv
            [
                str(PYTHON),
                str(ROOT / "manage.py"),
                "import_opensquilla",
                str(path),
                "--follow",
                "--gateway",
                name,
            ],
            cwd=ROOT,
            env=env,
            stdout=(out / f"follower-{name}.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        for name, path in sources.items()
    }


def stop_all(processes: list[subprocess.Popen[Any]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def wait_initial(gateways: list[str], timeout: float) -> float:
    from receipts_app.mirror.models import MirrorSource

    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        done = MirrorSource.objects.filter(gateway_id__in=gateways, initial_sync_done=True)
        if done.count() == len(gateways):
            return time.perf_counter() - start
        time.sleep(0.2)
    raise SystemExit("the followers did not finish their initial pass in time")


def measure_lag(
    sources: dict[str, Path],
    rate: float,
    seconds: float,
    writer: str = "reference",
    prefix: str = "",
) -> tuple[dict[str, dict[str, Any]], float, float]:
    """Per gateway: writes, lag figures; the writing phase's wall time; the writers' CPU."""
    from receipts_app.models import MemoryDurableReceipt

    count = int(rate * seconds)
    # CPU of the children reaped from here on: the writers only (the followers outlive this).
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    committed: dict[str, dict[str, int]] = {g: {} for g in sources}
    lock = threading.Lock()
    extra = ("--turn-prefix", prefix) if prefix else ()
    writers = {
        name: subprocess.Popen(  # noqa: S603 - fixed argv
            writer_command(
                writer, path, "load", "--count", str(count), "--rate", str(rate), "--trace", *extra
            ),
            stdout=subprocess.PIPE,
            text=True,
        )
        for name, path in sources.items()
    }

    def read(name: str, writer: subprocess.Popen[str]) -> None:
        assert writer.stdout is not None
        for line in writer.stdout:
            record = json.loads(line)
            if "key" in record:
                with lock:
                    committed[name][record["key"]] = record["committed_ms"]

    readers = [
        threading.Thread(target=read, args=(name, w), daemon=True) for name, w in writers.items()
    ]
    for reader in readers:
        reader.start()
    seen: dict[str, dict[str, int]] = {g: {} for g in sources}
    started = time.perf_counter()
    total = count * len(sources)
    writers_done_at: float | None = None

    def waiting() -> bool:
        # Until every committed receipt is seen, or 120 s after the last writer finished (a
        # starved machine may run the writers well past --seconds).
        nonlocal writers_done_at
        if sum(map(len, seen.values())) >= total:
            return False
        if writers_done_at is None:
            if all(w.poll() is not None for w in writers.values()):
                writers_done_at = time.perf_counter()
            return True
        return time.perf_counter() - writers_done_at < 120

    while waiting():
        for name in sources:
            with lock:
                pending = [k for k in committed[name] if k not in seen[name]]
            for at in range(0, len(pending), 500):
                chunk = pending[at : at + 500]
                found = MemoryDurableReceipt.objects.filter(
                    gateway_id=name, idempotency_key__in=chunk
                ).values_list("idempotency_key", flat=True)
                stamp = int(time.time() * 1000)
                for key in found:
                    seen[name][key] = stamp
        time.sleep(0.02)
    for writer in writers.values():
        writer.wait(timeout=120)
    children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    writers_cpu_s = (children_after.ru_utime - children_before.ru_utime) + (
        children_after.ru_stime - children_before.ru_stime
    )
    for reader in readers:
        reader.join(timeout=10)
    writing_s = (writers_done_at or time.perf_counter()) - started
    out: dict[str, dict[str, Any]] = {}
    for name in sources:
        stamps = committed[name]
        lags = [(seen[name][k] - stamps[k]) / 1000 for k in seen[name]]
        span = (max(stamps.values()) - min(stamps.values())) / 1000 if stamps else 0
        out[name] = {
            "writes": count,
            "committed": len(stamps),
            "applied": len(seen[name]),
            "achieved_rate_per_s": round(len(stamps) / max(span, 0.001), 1),
            "lag_p50_s": round(percentile(lags, 50), 3) if lags else None,
            "lag_p99_s": round(percentile(lags, 99), 3) if lags else None,
            "lag_max_s": round(max(lags), 3) if lags else None,
        }
        out[name]["_lags"] = lags
    return out, writing_s, writers_cpu_s


def measure_idle(followers: dict[str, subprocess.Popen[bytes]], seconds: float) -> dict[str, float]:
    time.sleep(3)  # let the last passes finish
    pids = {p.pid for p in followers.values()}
    before = {pid: cpu_seconds(pid) for pid in pids}
    time.sleep(seconds)
    used = {pid: cpu_seconds(pid) - before[pid] for pid in pids}
    sharing = {pid: sum(1 for p in followers.values() if p.pid == pid) for pid in pids}
    return {
        name: round(100 * used[p.pid] / sharing[p.pid] / seconds, 2)
        for name, p in followers.items()
    }


def run_phase(
    sources: dict[str, Path],
    followers: dict[str, subprocess.Popen[bytes]],
    args: argparse.Namespace,
    prefix: str = "",
) -> dict[str, Any]:
    """One writing phase: per gateway figures, the writing wall time, the writers' CPU, the
    followers' CPU per follower process and the rows they applied."""
    pids = {p.pid for p in followers.values()}
    cpu_before = {pid: cpu_seconds(pid) for pid in pids}
    applied_before = rows_applied(list(sources))
    per_gateway, wall, writers_cpu = measure_lag(
        sources, args.rate, args.seconds, args.writer, prefix
    )
    busy = {pid: cpu_seconds(pid) - cpu_before[pid] for pid in pids}
    return {
        "per_gateway": per_gateway,
        "wall": wall,
        "writers_cpu": writers_cpu,
        "busy": busy,
        "rows_applied": rows_applied(list(sources)) - applied_before,
    }


def summarize(
    phase: dict[str, Any],
    followers: dict[str, subprocess.Popen[bytes]],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """A phase's figures: per gateway (lag, follower CPU), overall, and the CPU budget."""
    per_gateway, busy, wall = phase["per_gateway"], phase["busy"], phase["wall"]
    every_lag = [x for g in per_gateway.values() for x in g.pop("_lags")]
    for name, figures in per_gateway.items():
        # The follower's CPU while its gateway was written (shared evenly in thread mode).
        pid = followers[name].pid
        sharing = sum(1 for p in followers.values() if p.pid == pid)
        figures["busy_cpu_percent_of_core"] = round(100 * busy[pid] / sharing / wall, 1)
    worst_p99 = max((g["lag_p99_s"] or 0) for g in per_gateway.values())
    lost = sum(g["committed"] - g["applied"] for g in per_gateway.values())
    writes = sum(g["committed"] for g in per_gateway.values())
    reached = all(g["achieved_rate_per_s"] >= 0.95 * args.rate for g in per_gateway.values())
    followers_cpu = sum(busy.values())
    # What the asked load costs in CPU, from what this run spent per write: whether the
    # machine could carry it at all.
    budget = {
        "cores": os.cpu_count() or 1,
        "writer_cpu_ms_per_write": round(1000 * phase["writers_cpu"] / max(writes, 1), 3),
        "follower_cpu_ms_per_write": round(1000 * followers_cpu / max(writes, 1), 3),
        "follower_cpu_ms_per_row_applied": round(
            1000 * followers_cpu / max(phase["rows_applied"], 1), 3
        ),
        "rows_applied": phase["rows_applied"],
        "writers_cores_at_asked_rate": round(
            phase["writers_cpu"] / max(writes, 1) * args.rate * args.gateways, 2
        ),
        "followers_cores_at_asked_rate": round(
            followers_cpu / max(writes, 1) * args.rate * args.gateways, 2
        ),
    }
    overall = {
        "lag_p50_s": round(percentile(every_lag, 50), 3) if every_lag else None,
        "lag_p99_s": round(percentile(every_lag, 99), 3) if every_lag else None,
        "lag_max_s": round(max(every_lag), 3) if every_lag else None,
        "worst_gateway_lag_p99_s": worst_p99,
        "not_applied": lost,
        # Met only at the load asked: a lag kept low because the writers fell short
        # of the asked rate says nothing of that rate.
        "asked_rate_reached": reached,
        "lag_goal_met": worst_p99 <= LAG_GOAL_S and lost == 0 and reached,
    }
    return {
        "writing_wall_s": round(wall, 1),
        "per_gateway": per_gateway,
        "cpu_budget": budget,
        "overall": overall,
    }


def print_phase(label: str, figures: dict[str, Any]) -> None:
    print(f"-- {label}")
    for name, g in figures["per_gateway"].items():
        idle = g.get("idle_cpu_percent_of_core")
        print(
            f"{name}: {g['achieved_rate_per_s']:>6.1f} writes/s, lag p50 {g['lag_p50_s']} s "
            f"p99 {g['lag_p99_s']} s (max {g['lag_max_s']}), applied {g['applied']}/"
            f"{g['committed']}, lost {g['entries_lost']} entries {g['receipts_lost']} receipts, "
            f"duplicated {g['entries_duplicated']} entries {g['receipts_duplicated']} receipts"
            + (f", idle CPU {idle} % of a core" if idle is not None else "")
        )
    print(json.dumps(figures["overall"]))
    print("CPU:", json.dumps(figures["cpu_budget"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gateways", type=int, default=10)
    parser.add_argument("--rate", type=float, default=100)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--idle-seconds", type=float, default=30)
    parser.add_argument("--mode", choices=("processes", "threads"), default="processes")
    parser.add_argument("--writer", choices=("reference", "light"), default="reference")
    parser.add_argument(
        "--long-session",
        type=int,
        default=0,
        help="then prefill each session with N entries and measure again (e.g. 30000)",
    )
    parser.add_argument("--database-url", default=DEFAULT_URL)
    parser.add_argument("--name", default="mirror_fleet")
    parser.add_argument("--work-dir", type=Path, default=OUT, help="sources and logs (wiped)")
    parser.add_argument("--result", type=Path, help="write the JSON here (default var/bench/)")
    args = parser.parse_args()
    if args.writer == "reference" and not REF_PYTHON.exists():
        subprocess.run(["bash", str(ROOT / "bench" / "reference_venv.sh")], check=True)  # noqa: S607
    if not args.database_url.startswith(("postgres", "sqlite:///")):
        raise SystemExit(
            "--database-url must name a PostgreSQL database (it is dropped first), "
            "or a sqlite:/// file (deleted first)"
        )
    argv = " ".join(sys.argv[1:])
    out_dir = args.work_dir
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    loads = LoadSampler()
    reset_database(args.database_url)
    env = dict(
        os.environ,
        DATABASE_URL=args.database_url,
        OPENSQUILLA_CHECKPOINT_WORKSPACE=str(out_dir / "workspace"),
        LOG_LEVEL="WARNING",
    )
    env.pop("OPENSQUILLA_SOURCE_DB", None)
    env.pop("OPENSQUILLA_SOURCES", None)
    os.environ.update(DATABASE_URL=args.database_url)
    subprocess.run(  # noqa: S603 - fixed argv
        [str(PYTHON), str(ROOT / "manage.py"), "migrate", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=env,
        check=True,
    )
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opensquilla_site.settings")
    import django

    django.setup()
    from django.conf import settings

    sources = {f"g{i:02d}": out_dir / f"g{i:02d}" / "sessions.db" for i in range(args.gateways)}
    for path in sources.values():
        fresh_source(path, args.writer)
    followers = start_followers(args.mode, sources, env, out_dir)
    long_figures = None
    try:
        loads.phase = "initial"
        initial_s = wait_initial(list(sources), 300)
        loads.phase = "lag"
        short = run_phase(sources, followers, args)
        short["per_gateway"] = {
            g: {**f, **c}
            for (g, f), c in zip(
                short["per_gateway"].items(), lost_and_duplicated(sources).values(), strict=True
            )
        }
        if args.long_session:
            loads.phase = "prefill"
            for path in sources.values():
                subprocess.run(  # noqa: S603 - fixed argv
                    writer_command(
                        args.writer if args.writer == "light" else "light",
                        path,
                        "prefill",
                        "--count",
                        str(args.long_session),
                    ),
                    check=True,
                    capture_output=True,
                )
            wait_caught_up(sources, 600)
            loads.phase = "lag_long_session"
            long_phase = run_phase(sources, followers, args, prefix="long-")
            long_phase["per_gateway"] = {
                g: {**f, **c}
                for (g, f), c in zip(
                    long_phase["per_gateway"].items(),
                    lost_and_duplicated(sources).values(),
                    strict=True,
                )
            }
            long_figures = summarize(long_phase, followers, args)
        loads.phase = "idle"
        idle = measure_idle(followers, args.idle_seconds)
    finally:
        stop_all(list(dict.fromkeys(followers.values())))
    load = loads.stop()
    figures = summarize(short, followers, args)
    for name, g in figures["per_gateway"].items():
        g["idle_cpu_percent_of_core"] = idle[name]
    worst_idle = max(idle.values())
    figures["overall"]["worst_gateway_idle_cpu_percent"] = worst_idle
    figures["overall"]["idle_goal_met"] = worst_idle <= IDLE_GOAL_PERCENT
    figures["overall"]["rows_lost"] = sum(
        g["entries_lost"] + g["receipts_lost"] for g in figures["per_gateway"].values()
    )
    figures["overall"]["rows_duplicated"] = sum(
        g["entries_duplicated"] + g["receipts_duplicated"] for g in figures["per_gateway"].values()
    )
    result = {
        "kind": "mirror_fleet",
        "command": f"bench/mirror_fleet.py {argv}".strip(),
        "mode": args.mode,
        "writer": args.writer,
        "gateways": args.gateways,
        "rate_per_gateway": args.rate,
        "seconds": args.seconds,
        "idle_seconds": args.idle_seconds,
        "interval_s": settings.OPENSQUILLA_MIRROR_INTERVAL,
        "database": "sqlite" if args.database_url.startswith("sqlite") else "postgresql",
        "initial_pass_s": round(initial_s, 1),
        **figures,
        "lag_goal_s": LAG_GOAL_S,
        "idle_goal_percent": IDLE_GOAL_PERCENT,
        "loadavg": load,
        "machine": machine_info(),
    }
    if long_figures is not None:
        per_row_short = figures["cpu_budget"]["follower_cpu_ms_per_row_applied"]
        per_row_long = long_figures["cpu_budget"]["follower_cpu_ms_per_row_applied"]
        result["long_session"] = {
            "entries_before": args.long_session,
            **long_figures,
            # The pass's cost must not grow with the session: long over short, per row.
            "follower_cpu_per_row_vs_short": round(per_row_long / max(per_row_short, 1e-9), 2),
        }
    if args.result is not None:
        args.result.parent.mkdir(parents=True, exist_ok=True)
        args.result.write_text(json.dumps({"name": args.name, **result}, indent=2) + "\n")
        path = args.result
    else:
        path = write_result(args.name, result)
    print_phase(f"{args.gateways} gateways x {args.rate:g}/s ({args.writer} writer)", figures)
    if long_figures is not None:
        print_phase(f"the same at a {args.long_session}-entry session", long_figures)
        print(
            "follower CPU per row, long session / short:",
            result["long_session"]["follower_cpu_per_row_vs_short"],
        )
    print(json.dumps(load))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
