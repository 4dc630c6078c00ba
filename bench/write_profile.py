"""Where a ledger write's CPU goes: ``receipts_app.ledger`` at SQLite ``synchronous=OFF``, profiled.

    .venv/bin/python bench/write_profile.py --n 1000 --name write_profile_sqlite_off

Runs the ``after`` side of ``bench/write_rounds.py`` (the same writes, on a fresh migrated
SQLite database) under ``cProfile`` with the process's CPU clock (``time.process_time``), and
sums each function's own time into a few buckets: SQLite itself (the C calls that execute
statements and commit), Django's model instances, Django's connection and cursor machinery,
the ledger's own Python, and the rest. The profiler inflates Python's share (every Python call
pays its hook, a C call inside SQLite does not), so read the shares as an upper bound on the
Python side.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import re
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import workload as wl  # noqa: E402
import write_rounds as wr  # noqa: E402

BUCKETS = (
    ("sqlite", "SQLite: statements, commits (C)"),
    ("models", "Django model instances (`__init__`, `from_db`)"),
    ("connection", "Django connection proxies, cursor wrappers, async-safety checks"),
    ("ledger", "ledger Python (`receipts_app`, `opensquilla_site`)"),
    ("other", "other Python"),
)


def bucket(filename: str, name: str) -> str:
    if filename == "~" and ("sqlite3" in name or "SQLiteCursorWrapper" in name):
        return "sqlite"
    if "django/db/models/" in filename:
        return "models"
    if any(
        part in filename
        for part in (
            "django/utils/connection.py",
            "asgiref/",
            "django/db/backends/",
            "django/utils/asyncio.py",
            "django/utils/functional.py",
            "django/db/utils.py",
            "django/conf/",
        )
    ):
        return "connection"
    if "/receipts_app/" in filename or "/opensquilla_site/" in filename:
        return "ledger"
    return "other"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--name", default="write_profile_sqlite_off")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="osq-write-profile-"))
    env = {**os.environ, "OPENSQUILLA_SQLITE_SYNCHRONOUS": "FULL"}
    env.pop("DATABASE_URL", None)
    url = f"sqlite:///{folder / 'ledger.sqlite3'}"
    wr._migrate(wr.ROOT, url, env)
    os.environ.update(OPENSQUILLA_SQLITE_SYNCHRONOUS="FULL", DATABASE_CONN_MAX_AGE="600")

    profiler = cProfile.Profile(time.process_time)
    plain_timed = wr.timed

    def profiled(fn, items):
        profiler.enable()
        try:
            return plain_timed(fn, items)
        finally:
            profiler.disable()

    wr.timed = profiled
    figures = wr.child_django(wr.ROOT, url, args.n, "OFF")
    stats = pstats.Stats(profiler)
    sums = dict.fromkeys((key for key, _ in BUCKETS), 0.0)
    top: list[tuple[float, str]] = []
    for (filename, _line, name), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():
        sums[bucket(filename, name)] += tottime
        label = re.sub(r" at 0x[0-9a-f]+", "", name).strip("<>")
        top.append((tottime, label if filename == "~" else f"{Path(filename).name}:{label}"))
    total = sum(sums.values())
    writes = 3 * args.n
    top.sort(reverse=True)
    result = {
        "kind": "write_profile",
        "backend": "sqlite",
        "sqlite_sync": figures.get("durability"),
        "n": args.n,
        "writes": writes,
        "profiled_cpu_us_per_write": round(total / writes * 1e6, 1),
        "buckets": [
            {
                "bucket": key,
                "label": label,
                "share": round(sums[key] / total, 3),
                "us_per_write": round(sums[key] / writes * 1e6, 1),
            }
            for key, label in BUCKETS
        ],
        "top_functions": [
            {"function": where, "us_per_write": round(t / writes * 1e6, 1)} for t, where in top[:8]
        ],
        "machine": wl.machine_info(),
        "command": " ".join(["bench/write_profile.py", *sys.argv[1:]]),
    }
    path = wl.write_result(args.name, result)
    for b in result["buckets"]:
        print(f"{b['share']:6.1%} {b['us_per_write']:7.1f} us/write  {b['label']}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
