"""The checkpoint scrub (receipts_app.scrub, issue 27): throughput against the disk and against
the bare floor, CPU per MB, and the cost of a cycle with nothing changed.

``--rounds`` interleaved rounds (default 5), each of:

1. **The disk.** A file as large as the checkpoint set is written, synced and dropped from the
   page cache (``posix_fadvise(DONTNEED)``, no root needed), then read sequentially in 1 MiB
   reads: the disk's sequential read rate, measured in this round.
2. **The floor.** The same checkpoint files, dropped from the page cache, read by the bare
   minimum the scrub cannot do without: open, ``POSIX_FADV_WILLNEED``, one read, sha256,
   close, in as many processes as the scrub's readers (``OPENSQUILLA_SCRUB_READER_PROCESSES``),
   no database and no checks. What Python reads these files at on this machine now.
3. **A first read, unthrottled.** The files dropped from the page cache, what the last round
   parsed forgotten, one full cycle (``scrub_checkpoints(full=True, rate=0)``) reads and parses
   every file.
4. **A full re-read, unthrottled.** Dropped again; a full cycle hashes bytes it already parsed
   (``parsed_hash``): the cycle the scrub runs every ``OPENSQUILLA_SCRUB_FULL_CYCLE_SECONDS``.

For each: MB/s, checkpoints/s, the ratio to the disk's rate of the same round (goal >= 0.5)
and to the floor's, and the CPU per MB of the scrub's process and its reader processes
together. The figures are medians over the rounds, with their spread.

Then **a cycle with nothing changed**: the same files again, nothing touched: the cycle must
read no file bytes (asserted through the report's counters) and costs a ``stat`` and its share
of the batched receipt reads per checkpoint. Its CPU per checkpoint, times 1M checkpoint
receipts, over the cycle's length (``OPENSQUILLA_SCRUB_CYCLE_SECONDS``, default 3600 s), is the
share of a core a 1M-receipt cycle costs (goal <= 1 %). Measured at ``--checkpoints`` and
extrapolated linearly to 1M (the walk is keyset batches of 1,000 read from
``idx_mdr_scrub_walk`` in id order, so its cost per row does not grow with the table: measured
flat from 10,000 to 40,000); the report says so.

SQLite in this process by default (the database's CPU is then inside the process CPU
measured); ``--backend postgres`` measures the scrub's own processes only (the server's CPU is
not in it, the report says so).

    .venv/bin/python bench/scrub.py [--checkpoints 10000] [--events 40] [--rounds 5]
                                    [--backend sqlite]

Writes ``var/bench/scrub_<backend>.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

MB = 1024 * 1024
GATEWAY = "local"
ONE_MILLION = 1_000_000


def _drop_cache(path: Path) -> None:
    """Evict a clean file from the page cache, so the next read comes from the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def disk_read_rate(root: Path, size: int) -> float:
    """Bytes/s of one cold sequential read of a ``size``-byte file under ``root``."""
    path = root / "disk-probe.bin"
    block = os.urandom(MB)
    with open(path, "wb") as handle:
        for _ in range(max(1, size // MB)):
            handle.write(block)
    _drop_cache(path)
    started = time.perf_counter()
    total = 0
    with open(path, "rb", buffering=0) as handle:
        while chunk := handle.read(MB):
            total += len(chunk)
    elapsed = time.perf_counter() - started
    path.unlink()
    return total / elapsed if elapsed else float("inf")


def seed(root: Path, count: int, events: int) -> tuple[list[Path], int]:
    """``count`` checkpoint files of ``events`` events each under ``root``, and their saved
    receipts (bulk inserted, through the count triggers). Returns the files and total bytes."""
    from receipts_app.checkpoint.events import build_checkpoint_events, serialise_checkpoint_events
    from receipts_app.checkpoint.writer import checkpoint_relative_path
    from receipts_app.models import MemoryDurableReceipt

    files: list[Path] = []
    receipts = []
    total = 0
    for index in range(count):
        key = f"agent:main:bench:s{index}"
        entries = [
            {
                "id": n + 1,
                "role": "user" if n % 2 == 0 else "assistant",
                "content": f"turn {n} of session {index}: " + "lorem ipsum dolor sit amet " * 6,
                "created_at": 1_700_000_000_000 + n,
            }
            for n in range(events)
        ]
        turn = f"through-{events}"
        built = build_checkpoint_events(
            entries, session_key=key, session_id=f"sid-{index}", turn_id=turn, clock_ms=1
        )
        body = "".join(line + "\n" for line in serialise_checkpoint_events(built)).encode()
        relative = checkpoint_relative_path(key, turn)
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
        files.append(path)
        total += len(body)
        digest = hashlib.sha256(body).hexdigest()
        receipts.append(
            MemoryDurableReceipt(
                gateway_id=GATEWAY,
                session_key=key,
                session_id=f"sid-{index}",
                turn_id=turn,
                scope="checkpoint",
                source_path=relative,
                content_hash=digest,
                coverage_turn_id=turn,
                coverage_hash=digest,
                coverage_entry_count=events,
                idempotency_key=f"checkpoint:{key}:{turn}:{digest}",
                status="checkpoint_saved",
                agent_id="main",
            )
        )
        if len(receipts) >= 5000:
            MemoryDurableReceipt.objects.bulk_create(receipts)
            receipts = []
    if receipts:
        MemoryDurableReceipt.objects.bulk_create(receipts)
    return files, total


def _cpu() -> float:
    """CPU seconds of this process and of its children that have ended (the scrub's reader
    processes end with its run)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _timed_scrub(**kwargs: Any) -> tuple[Any, float, float]:
    from receipts_app.scrub import scrub_checkpoints

    wall, cpu = time.perf_counter(), _cpu()
    report = scrub_checkpoints(GATEWAY, force=True, seconds=0, rate=0, **kwargs)
    return report, time.perf_counter() - wall, _cpu() - cpu


def _bare_read(paths: list[str]) -> int:
    """The floor's reader: every file opened and asked for, then read and hashed."""
    fds = [os.open(path, os.O_RDONLY) for path in paths]
    for fd in fds:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    total = 0
    for fd in fds:
        body = os.read(fd, os.fstat(fd).st_size + 1)
        os.close(fd)
        hashlib.sha256(body).hexdigest()
        total += len(body)
    return total


def floor_read_rate(files: list[Path], processes: int) -> float:
    """Bytes/s of the bare read of ``files``, cold, in ``processes`` processes (chunks of the
    scrub's request size)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from receipts_app.scrub.run import PROCESS_CHUNK

    names = [str(path) for path in files]
    chunks = [names[i : i + PROCESS_CHUNK] for i in range(0, len(names), PROCESS_CHUNK)]
    context = multiprocessing.get_context("fork")  # the function is this file's, not importable
    with ProcessPoolExecutor(max(1, processes), mp_context=context) as pool:
        pool.submit(int).result()  # the processes are up before the clock starts
        for path in files:
            _drop_cache(path)
        started = time.perf_counter()
        total = sum(pool.map(_bare_read, chunks))
        elapsed = time.perf_counter() - started
    return total / elapsed if elapsed else float("inf")


def _full(files: list[Path], root: Path, label: str) -> dict[str, Any]:
    for path in files:
        _drop_cache(path)
    report, wall, cpu = _timed_scrub(full=True, root=root)
    assert report.files_read == len(files) and report.found_unsafe == 0, report
    rate = report.bytes_read / wall if wall else float("inf")
    return {
        "label": label,
        "checkpoints": report.files_read,
        "mb": round(report.bytes_read / MB, 2),
        "seconds": round(wall, 3),
        "mb_per_s": round(rate / MB, 1),
        "checkpoints_per_s": round(report.files_read / wall, 1) if wall else None,
        "cpu_ms_per_mb": round(cpu * 1000 / (report.bytes_read / MB), 1)
        if report.bytes_read
        else None,
    }


def _round(files: list[Path], root: Path, disk_bytes: int, processes: int) -> dict[str, Any]:
    from receipts_app.models import CheckpointVerification

    disk = disk_read_rate(root, disk_bytes)
    floor = floor_read_rate(files, processes)
    CheckpointVerification.objects.update(parsed_hash="")  # the first read parses again
    first = _full(files, root, "first read (parse)")
    again = _full(files, root, "full re-read (hash only)")
    for run in (first, again):
        rate = run["mb_per_s"] * MB
        run["ratio_to_disk"] = round(rate / disk, 2) if disk else None
        run["ratio_to_floor"] = round(rate / floor, 2) if floor else None
    return {
        "disk_mb_per_s": round(disk / MB, 1),
        "floor_mb_per_s": round(floor / MB, 1),
        "first": first,
        "again": again,
    }


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _summary(rounds: list[dict], key: str) -> dict[str, Any]:
    """One full-read figure over the rounds: the median of each value, and the spread of the
    rate and of the ratios."""
    runs = [r[key] for r in rounds]
    out: dict[str, Any] = {"label": runs[0]["label"], "checkpoints": runs[0]["checkpoints"]}
    out["mb"] = runs[0]["mb"]
    for name in ("seconds", "mb_per_s", "checkpoints_per_s", "cpu_ms_per_mb"):
        out[name] = round(_median([run[name] for run in runs]), 3 if name == "seconds" else 1)
    for name in ("mb_per_s", "ratio_to_disk", "ratio_to_floor", "cpu_ms_per_mb"):
        values = [run[name] for run in runs]
        if name.startswith("ratio"):
            out[name] = round(_median(values), 2)
        out[f"{name}_min"], out[f"{name}_max"] = min(values), max(values)
    return out


def measure(
    root: Path,
    checkpoints: int,
    events: int,
    *,
    rounds: int = 5,
    disk_bytes: int | None = None,
) -> dict:
    """Every figure of this benchmark, on the database Django is set up with now."""
    from django.test.utils import override_settings

    from receipts_app.scrub import settings as scrub_settings

    files, total = seed(root, checkpoints, events)
    size = disk_bytes if disk_bytes is not None else max(total, 64 * MB)
    with override_settings(OPENSQUILLA_CHECKPOINT_WORKSPACE=str(root)):
        processes = scrub_settings.reader_processes()
        done = [_round(files, root, size, processes) for _ in range(max(1, rounds))]
        unchanged, wall, cpu = _timed_scrub(full=False, root=root)
    # The goal the issue sets: a nothing-changed cycle reads no file bytes at all.
    assert (unchanged.files_read, unchanged.bytes_read) == (0, 0), unchanged
    assert unchanged.stat_only == checkpoints, unchanged
    cycle_s = scrub_settings.cycle_seconds()
    per_checkpoint_us = cpu * 1e6 / checkpoints
    core_share = per_checkpoint_us * ONE_MILLION / 1e6 / cycle_s
    disks = [r["disk_mb_per_s"] for r in done]
    floors = [r["floor_mb_per_s"] for r in done]
    return {
        "checkpoints": checkpoints,
        "events_per_checkpoint": events,
        "checkpoint_bytes_mean": round(total / checkpoints),
        "reader_processes": processes,
        "rounds": done,
        "disk_mb_per_s": round(_median(disks), 1),
        "disk_mb_per_s_min": min(disks),
        "disk_mb_per_s_max": max(disks),
        "floor_mb_per_s": round(_median(floors), 1),
        "floor_mb_per_s_min": min(floors),
        "floor_mb_per_s_max": max(floors),
        "full": [_summary(done, "first"), _summary(done, "again")],
        "unchanged": {
            "checkpoints": checkpoints,
            "files_read": unchanged.files_read,
            "bytes_read": unchanged.bytes_read,
            "seconds": round(wall, 3),
            "cpu_seconds": round(cpu, 3),
            "cpu_us_per_checkpoint": round(per_checkpoint_us, 1),
            "cycle_seconds": cycle_s,
            "extrapolated_to": ONE_MILLION,
            "core_share_at_1m_percent": round(core_share * 100, 2),
            "goal_percent": 1.0,
        },
    }


def print_figures(result: dict, backend: str) -> None:
    rounds = len(result["rounds"])
    print(
        f"{rounds} interleaved rounds; medians [min-max]. Disk sequential read (cold): "
        f"{result['disk_mb_per_s']} MB/s [{result['disk_mb_per_s_min']}-"
        f"{result['disk_mb_per_s_max']}]; bare floor (open, willneed, read, sha256 in "
        f"{result['reader_processes']} processes): {result['floor_mb_per_s']} MB/s "
        f"[{result['floor_mb_per_s_min']}-{result['floor_mb_per_s_max']}]"
    )
    for run in result["full"]:
        print(
            f"scrub {run['label']}: {run['checkpoints']} checkpoints, {run['mb']} MB, "
            f"{run['mb_per_s']} MB/s [{run['mb_per_s_min']}-{run['mb_per_s_max']}], "
            f"{run['checkpoints_per_s']} checkpoints/s, {run['ratio_to_disk']} of the disk "
            f"[{run['ratio_to_disk_min']}-{run['ratio_to_disk_max']}] (goal >= 0.5), "
            f"{run['ratio_to_floor']} of the floor, {run['cpu_ms_per_mb']} ms CPU per MB "
            "(scrub and reader processes)"
        )
    u = result["unchanged"]
    where = "process CPU incl. SQLite" if backend == "sqlite" else "scrub process only"
    print(
        f"nothing changed: {u['checkpoints']} checkpoints, {u['files_read']} files read, "
        f"{u['bytes_read']} bytes; {u['cpu_seconds']} s CPU ({where}) = "
        f"{u['cpu_us_per_checkpoint']} us a checkpoint; extrapolated to 1M receipts over a "
        f"{u['cycle_seconds']:.0f} s cycle: {u['core_share_at_1m_percent']} % of a core "
        f"(goal <= 1 %; measured at {u['checkpoints']}, not seeded at 1M)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoints", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--db-name", default="osq_scrub_bench")
    args = parser.parse_args()

    import djbench
    import workload as wl

    url = djbench.fresh_database(args.backend, args.db_name)
    root = wl.RESULTS_DIR / "scrub-workspace"
    if root.exists():
        import shutil

        shutil.rmtree(root)
    root.mkdir(parents=True)
    djbench.setup_django(url)
    load_before = os.getloadavg()[0]
    result = measure(root, args.checkpoints, args.events, rounds=args.rounds)
    result.update(
        kind="scrub",
        command=" ".join(["bench/scrub.py", *sys.argv[1:]]),
        backend=args.backend,
        machine=wl.machine_info(),
        load_before=load_before,
        load_after=os.getloadavg()[0],
    )
    print_figures(result, args.backend)
    print(wl.write_result(f"scrub_{args.backend}", result))


if __name__ == "__main__":
    main()
