"""The live mirror's figures (docs/PERFORMANCE.md, "Mirror").

1. Lag: the reference ``SessionStorage`` (opensquilla 0.3.0, ``var/bench/ref-venv``) writes
   ``--rate`` receipts per second (plus one message each) to a live ``sessions.db`` while
   ``import_opensquilla --follow`` (its own process, default interval) follows it. The writer
   prints each receipt's commit time; this process polls the ledger every 20 ms and records
   when each receipt appears. Figures: p50/p99/max of appearance - commit.
2. Idle cost: CPU time of the follower process (``/proc/<pid>/stat``) over ``--idle-seconds``
   with a source that does not change, as a share of one core.
3. Initial import: a source of ``--import-receipts`` receipts and ``--entries-per-receipt``
   messages each (bulk SQL into a schema the reference created), followed from scratch: time
   until the initial pass is done, rows per second.

Its own ledger database: a SQLite file under ``var/bench/mirror`` (or ``--database-url``).
The machine is shared: figures are noisy, and the report says so.

    .venv/bin/python bench/mirror.py [--rate 100] [--seconds 20] [--import-receipts 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "var" / "bench" / "mirror"
REF_PYTHON = ROOT / "var" / "bench" / "ref-venv" / "bin" / "python"
WRITER = ROOT / "tests" / "mirror" / "reference_writer.py"
PYTHON = ROOT / ".venv" / "bin" / "python"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def env_for(database_url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=database_url,
        OPENSQUILLA_CHECKPOINT_WORKSPACE=str(OUT / "workspace"),
        LOG_LEVEL="WARNING",
    )
    return env


def fresh_source(path: Path) -> None:
    """An empty sessions.db whose schema the reference itself created."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    subprocess.run(  # noqa: S603 - fixed argv
        [str(REF_PYTHON), str(WRITER), str(path), "load", "--count", "1"],
        check=True,
        capture_output=True,
    )


def start_follower(source: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(  # noqa: S603 - fixed argv
        [str(PYTHON), str(ROOT / "manage.py"), "import_opensquilla", str(source), "--follow"],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def wait_initial(timeout: float) -> float:
    from receipts_app.mirror.models import MirrorSource

    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if MirrorSource.objects.filter(initial_sync_done=True).exists():
            return time.perf_counter() - start
        time.sleep(0.2)
    raise SystemExit("the follower did not finish its initial pass in time")


def measure_lag(
    rate: float, seconds: float, env: dict[str, str], idle_seconds: float = 30.0
) -> dict:
    from receipts_app.models import MemoryDurableReceipt

    source = OUT / "live" / "sessions.db"
    fresh_source(source)
    follower = start_follower(source, env, OUT / "follower-lag.log")
    try:
        wait_initial(120)
        count = int(rate * seconds)
        writer = subprocess.Popen(  # noqa: S603 - fixed argv
            [
                str(REF_PYTHON),
                str(WRITER),
                str(source),
                "load",
                "--count",
                str(count),
                "--rate",
                str(rate),
                "--trace",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        committed: dict[str, int] = {}
        lock = threading.Lock()

        def read() -> None:
            assert writer.stdout is not None
            for line in writer.stdout:
                record = json.loads(line)
                if "key" in record:
                    with lock:
                        committed[record["key"]] = record["committed_ms"]

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        seen: dict[str, int] = {}
        started = time.perf_counter()
        while len(seen) < count and time.perf_counter() - started < seconds + 120:
            with lock:
                pending = [k for k in committed if k not in seen]
            for start in range(0, len(pending), 500):
                chunk = pending[start : start + 500]
                found = MemoryDurableReceipt.objects.filter(idempotency_key__in=chunk)
                stamp = int(time.time() * 1000)
                for key in found.values_list("idempotency_key", flat=True):
                    seen[key] = stamp
            time.sleep(0.02)
        writer.wait(timeout=60)
        achieved = count / max(0.001, (max(committed.values()) - min(committed.values())) / 1000)
        lags = [(seen[k] - committed[k]) / 1000 for k in seen]
        idle = measure_idle(follower, idle_seconds)
        return {
            "writes": count,
            "achieved_rate_per_s": round(achieved, 1),
            "applied": len(seen),
            "lag_p50_s": round(percentile(lags, 50), 3),
            "lag_p99_s": round(percentile(lags, 99), 3),
            "lag_max_s": round(max(lags), 3),
            **idle,
        }
    finally:
        stop(follower)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_idle(follower: subprocess.Popen[bytes], seconds: float) -> dict:
    time.sleep(3)  # let the last pass finish
    before = cpu_seconds(follower.pid)
    time.sleep(seconds)
    used = cpu_seconds(follower.pid) - before
    return {"idle_seconds": seconds, "idle_cpu_percent_of_core": round(100 * used / seconds, 2)}


def build_large_source(path: Path, receipts: int, entries_per_receipt: int) -> float:
    fresh_source(path)
    t0 = time.perf_counter()
    conn = sqlite3.connect(path)
    key = "agent:main:main"
    session_id = conn.execute(
        "SELECT session_id FROM sessions WHERE session_key = ?", (key,)
    ).fetchone()[0]
    base = int(time.time() * 1000) - receipts
    with conn:
        for start in range(0, receipts, 10_000):
            stop_at = min(receipts, start + 10_000)
            conn.executemany(
                "INSERT INTO memory_durable_receipts (receipt_id, session_key, session_id, turn_id,"
                " scope, source_path, idempotency_key, status, reason, attempt_count,"
                " created_at, updated_at) VALUES (?, ?, ?, ?, 'checkpoint', ?, ?, ?, ?, 0, ?, ?)",
                [
                    (
                        str(uuid.uuid4()),
                        key,
                        session_id,
                        f"bulk-{i}",
                        f"memory/.checkpoints/main/bulk-{i}.jsonl",
                        f"checkpoint:{key}:bulk-{i}",
                        "checkpoint_failed" if i % 10 == 0 else "checkpoint_saved",
                        "disk full" if i % 10 == 0 else None,
                        base + i,
                        base + i,
                    )
                    for i in range(start, stop_at)
                ],
            )
            conn.executemany(
                "INSERT INTO transcript_entries (session_id, session_key, message_id, role,"
                " content, created_at, schema_version) VALUES (?, ?, ?, 'user', ?, ?, 1)",
                [
                    (session_id, key, str(uuid.uuid4()), f"message {i}/{j}", base + i)
                    for i in range(start, stop_at)
                    for j in range(entries_per_receipt)
                ],
            )
    conn.close()
    return time.perf_counter() - t0


def measure_initial_import(receipts: int, entries_per_receipt: int, env: dict[str, str]) -> dict:
    source = OUT / "large" / "sessions.db"
    build = build_large_source(source, receipts, entries_per_receipt)
    started = time.perf_counter()
    follower = start_follower(source, env, OUT / "follower-import.log")
    try:
        seconds = wait_initial(24 * 3600)
    finally:
        stop(follower)
    total_rows = receipts * (1 + entries_per_receipt)
    return {
        "receipts": receipts,
        "transcript_entries": receipts * entries_per_receipt,
        "source_build_s": round(build, 1),
        "initial_import_s": round(seconds, 1),
        "wall_s_including_start": round(time.perf_counter() - started, 1),
        "rows_per_s": round(total_rows / seconds),
        "source_mb": round(source.stat().st_size / 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--rate", type=float, default=100)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--import-receipts", type=int, default=100_000)
    parser.add_argument("--entries-per-receipt", type=int, default=5)
    parser.add_argument("--skip-import", action="store_true")
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    args = parser.parse_args()
    if not REF_PYTHON.exists():
        subprocess.run(["bash", str(ROOT / "bench" / "reference_venv.sh")], check=True)  # noqa: S607
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    url = args.database_url or f"sqlite:///{OUT / 'ledger.sqlite3'}"
    env = env_for(url)
    os.environ.update(env)
    subprocess.run(  # noqa: S603 - fixed argv
        [str(PYTHON), str(ROOT / "manage.py"), "migrate", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=env,
        check=True,
    )
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opensquilla_site.settings")
    import django

    django.setup()
    from receipts_app.mirror.models import MirrorSource

    results: dict = {"database": url.split(":", 1)[0], "cores": os.cpu_count()}
    results["lag"] = measure_lag(args.rate, args.seconds, env, args.idle_seconds)
    print(json.dumps(results["lag"]), flush=True)
    if not args.skip_import:
        MirrorSource.objects.all().delete()
        results["initial_import"] = measure_initial_import(
            args.import_receipts, args.entries_per_receipt, env
        )
        print(json.dumps(results["initial_import"]), flush=True)
    (OUT / "results.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
