"""The checkpoint scrub (receipts_app.scrub, issue 27): throughput against the disk, CPU per MB,
and the cost of a cycle with nothing changed.

1. **The disk.** A file as large as the checkpoint set is written, synced and dropped from the
   page cache (``posix_fadvise(DONTNEED)``, no root needed), then read sequentially in 1 MiB
   reads: the disk's sequential read rate, measured in this run.
2. **A full scrub, unthrottled.** ``--checkpoints`` checkpoint files (real checkpoint JSONL,
   ``--events`` events each) with their ``checkpoint_saved`` receipts; the files are dropped
   from the page cache, then one full cycle (``scrub_checkpoints(full=True, rate=0)``) reads
   every one: MB/s, checkpoints/s, the ratio to the disk's rate (goal >= 0.5) and the process
   CPU per MB read. Twice: the first read of each file parses it, a later full cycle only hashes
   bytes already parsed (``parsed_hash``).
3. **A cycle with nothing changed.** The same files again, nothing touched: the cycle must read
   no file bytes (asserted through the report's counters) and costs a ``stat`` and its share
   of the batched receipt reads per checkpoint. Its CPU per checkpoint, times 1M checkpoint
   receipts, over the cycle's length (``OPENSQUILLA_SCRUB_CYCLE_SECONDS``, default 3600 s),
   is the share of a core a 1M-receipt cycle costs (goal <= 1 %). Measured at ``--checkpoints``
   and extrapolated linearly to 1M (the walk is keyset batches of 500 read from
   ``idx_mdr_scrub_walk`` in id order, so its cost per row does not grow with the table:
   measured flat from 10,000 to 40,000); the report says so.

SQLite in this process by default (the database's CPU is then inside the process CPU
measured); ``--backend postgres`` measures the scrub's own process only (the server's CPU is
not in it, the report says so).

    .venv/bin/python bench/scrub.py [--checkpoints 10000] [--events 40] [--backend sqlite]

Writes ``var/bench/scrub_<backend>.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
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


def _timed_scrub(**kwargs: Any) -> tuple[Any, float, float]:
    from receipts_app.scrub import scrub_checkpoints

    wall, cpu = time.perf_counter(), time.process_time()
    report = scrub_checkpoints(GATEWAY, force=True, seconds=0, rate=0, **kwargs)
    return report, time.perf_counter() - wall, time.process_time() - cpu


def _full(files: list[Path], root: Path, disk: float, label: str) -> dict[str, Any]:
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
        "ratio_to_disk": round(rate / disk, 2) if disk else None,
        "cpu_ms_per_mb": round(cpu * 1000 / (report.bytes_read / MB), 1)
        if report.bytes_read
        else None,
    }


def measure(root: Path, checkpoints: int, events: int, *, disk_bytes: int | None = None) -> dict:
    """Every figure of this benchmark, on the database Django is set up with now."""
    from django.test.utils import override_settings

    from receipts_app.scrub import settings as scrub_settings

    files, total = seed(root, checkpoints, events)
    disk = disk_read_rate(root, disk_bytes if disk_bytes is not None else max(total, 64 * MB))
    with override_settings(OPENSQUILLA_CHECKPOINT_WORKSPACE=str(root)):
        first = _full(files, root, disk, "first read (parse)")
        again = _full(files, root, disk, "full re-read (hash only)")
        unchanged, wall, cpu = _timed_scrub(full=False, root=root)
    # The goal the issue sets: a nothing-changed cycle reads no file bytes at all.
    assert (unchanged.files_read, unchanged.bytes_read) == (0, 0), unchanged
    assert unchanged.stat_only == checkpoints, unchanged
    cycle_s = scrub_settings.cycle_seconds()
    per_checkpoint_us = cpu * 1e6 / checkpoints
    core_share = per_checkpoint_us * ONE_MILLION / 1e6 / cycle_s
    return {
        "checkpoints": checkpoints,
        "events_per_checkpoint": events,
        "checkpoint_bytes_mean": round(total / checkpoints),
        "disk_mb_per_s": round(disk / MB, 1),
        "full": [first, again],
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
    print(f"disk sequential read (cold, this run): {result['disk_mb_per_s']} MB/s")
    for run in result["full"]:
        print(
            f"scrub {run['label']}: {run['checkpoints']} checkpoints, {run['mb']} MB in "
            f"{run['seconds']} s = {run['mb_per_s']} MB/s, {run['checkpoints_per_s']} "
            f"checkpoints/s, {run['ratio_to_disk']} of the disk (goal >= 0.5), "
            f"{run['cpu_ms_per_mb']} ms CPU per MB"
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
    result = measure(root, args.checkpoints, args.events)
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
