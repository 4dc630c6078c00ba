"""A requeue plan over N failed receipts on PostgreSQL, alone: dry run and real execution.

The same measurement as the requeue part of ``bench/scale.py`` (``scale.requeue``: the same
cohort, dry run timed around ``create_requeue_plan``, execution through 2 Celery workers on
Redis timed until the plan is ``done``), without the 1M-row page stages, so a change to the
requeue engine can be measured before and after in a few minutes.

    .venv/bin/python bench/requeue_plan.py [--rows 100000] [--background 0] [--timeout 240]

``--background`` seeds that many ordinary receipts first (the scale mix), so the plan's
filter runs inside a bigger ledger. Uses its own database ``opensquilla_bench_requeue`` and
Redis db 14 (flushed before and after). Results: ``var/bench/requeue_plan.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import djbench  # noqa: E402
import scale  # noqa: E402
import workload as wl  # noqa: E402

PG_DB = "opensquilla_bench_requeue"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000, help="failed receipts in the plan")
    parser.add_argument("--background", type=int, default=0, help="other receipts seeded first")
    parser.add_argument("--timeout", type=float, default=240.0, help="execution cap, seconds")
    parser.add_argument("--quick", action="store_true", help="5,000 rows, 60 s cap")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.timeout = 5_000, min(args.timeout, 60.0)

    url = djbench.fresh_database("postgres", PG_DB)
    djbench.setup_django(url)
    if args.background:
        s = time.perf_counter()
        djbench.bulk_seed(
            wl.receipt_row("scale", i, sessions=scale.SESSIONS) for i in range(args.background)
        )
        djbench.emit(f"seeded {args.background} background rows in {time.perf_counter() - s:.1f} s")
    plan = scale.requeue(url, args.rows, args.timeout)
    result = {
        "database_url": url,
        "versions": djbench.versions(),
        "machine": wl.machine_info(),
        "background_rows": args.background,
        "targets": {
            "dry_run_s": scale.TARGETS["dry_run_s"],
            "execute_s": scale.TARGETS["execute_s"],
        },
        "requeue": plan,
    }
    path = wl.write_result("requeue_plan", result)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
