"""How long the gateway migration takes on a large ledger (docs/OPERATIONS.md, "Upgrading a
large ledger").

A fresh database is migrated, taken back to just before the gateway migrations
(``sessions_app 0004``, which also unapplies ``receipts_app 0017`` and ``mirror 0003``), seeded
with ``--rows`` receipts (the scale benchmark's mix), 20,000 sessions and 5 transcript entries
each, and then migrated forward again, timed: every existing row moves into ``local``.

    .venv/bin/python bench/gateway_migration.py [--backend sqlite|postgres] [--rows 1000000]
        [--db-name opensquilla_bench_gateways]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import djbench  # noqa: E402
import workload as wl  # noqa: E402

SESSIONS = 20_000
ENTRIES_PER_SESSION = 5


def manage(url: str, *args: str) -> float:
    started = time.perf_counter()
    subprocess.run(
        [str(djbench.VENV_BIN / "python"), "manage.py", *args, "--noinput", "-v", "0"],
        cwd=djbench.ROOT,
        env=djbench.base_env(url),
        check=True,
    )
    return time.perf_counter() - started


def seed_sessions() -> None:
    from django.db import connection, transaction

    sessions = []
    entries = []
    for i in range(SESSIONS):
        key, session_id = wl.session_for(i, SESSIONS)
        sessions.append((key, session_id, 0, "main", "active", 0, 0))
        for n in range(ENTRIES_PER_SESSION):
            entries.append((session_id, key, f"m-{i}-{n}", "user", "hello", n))
    with transaction.atomic(), connection.cursor() as cur:
        cur.executemany(
            "INSERT INTO sessions_app_session (session_key, session_id, epoch, agent_id, "
            "status, created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            sessions,
        )
        cur.executemany(
            "INSERT INTO sessions_app_transcriptentry (session_id, session_key, message_id, "
            "role, content, created_at) VALUES (%s, %s, %s, %s, %s, %s)",
            entries,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("postgres", "sqlite"), default="sqlite")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--db-name", default="opensquilla_bench_gateways")
    args = parser.parse_args()

    url = djbench.fresh_database(args.backend, args.db_name)
    back_s = manage(url, "migrate", "sessions_app", "0004")
    djbench.emit(f"migrated back to sessions_app 0004 (empty) in {back_s:.1f} s")
    djbench.setup_django(url)
    started = time.perf_counter()
    seeded = djbench.bulk_seed(
        wl.receipt_row("scale", i, sessions=SESSIONS) for i in range(args.rows)
    )
    seed_sessions()
    djbench.emit(f"seeded {seeded} receipts in {time.perf_counter() - started:.1f} s")
    from django.db import connection

    connection.close()
    forward_s = manage(url, "migrate")
    djbench.emit(f"{args.backend}: gateway migration of {seeded:,} receipts: {forward_s:.1f} s")
    djbench.setup_django(url)
    from receipts_app.counts import find_drift
    from receipts_app.models import MemoryDurableReceipt

    local = MemoryDurableReceipt.objects.filter(gateway_id="local").count()
    drift = find_drift()
    djbench.emit(f"receipts in local: {local:,}; count drift after: {len(drift)} keys")
    wl.write_result(
        f"gateway_migration_{args.backend}",
        {
            "backend": args.backend,
            "rows": seeded,
            "sessions": SESSIONS,
            "transcript_entries": SESSIONS * ENTRIES_PER_SESSION,
            "migrate_s": round(forward_s, 1),
            "local_receipts": local,
            "count_drift_keys": len(drift),
            "versions": djbench.versions(),
            "machine": wl.machine_info(),
        },
    )


if __name__ == "__main__":
    main()
