"""How long the audit trail's gateway migration (``receipts_app 0018``) takes on a large
trail (docs/OPERATIONS.md, "Upgrading a large ledger").

A fresh database is migrated, taken back to ``receipts_app 0017``, seeded with ``--receipts``
receipts (the scale benchmark's mix) and ``--events`` audit events (nine in ten about a
receipt, one in ten a session event naming its session), and migrated forward, timed twice:
- with one gateway (every row ``local``'s: the column is added and nothing is backfilled);
- back again, then with one receipt and one session in ten moved to a second gateway, so the
  backfill reads the receipts and sessions for every event.

    .venv/bin/python bench/event_gateway_migration.py [--backend sqlite|postgres]
        [--receipts 200000] [--events 1000000] [--db-name opensquilla_bench_events]
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
EV = "receipts_app_receiptevent"


def manage(url: str, *args: str) -> float:
    started = time.perf_counter()
    subprocess.run(
        [str(djbench.VENV_BIN / "python"), "manage.py", *args, "--noinput", "-v", "0"],
        cwd=djbench.ROOT,
        env=djbench.base_env(url),
        check=True,
    )
    return time.perf_counter() - started


def seed(receipts: int, events: int) -> None:
    from django.db import connection, transaction

    postgres = connection.vendor == "postgresql"
    cols = ", ".join((*djbench.SEED_COLUMNS, "gateway_id"))
    rows = (
        (*djbench.seed_tuple(wl.receipt_row("scale", i, sessions=SESSIONS)), "local")
        for i in range(receipts)
    )
    with transaction.atomic(), connection.cursor() as cur:
        if postgres:
            with cur.cursor.copy(f"COPY {djbench.TABLE} ({cols}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            marks = ", ".join("%s" for _ in (*djbench.SEED_COLUMNS, "gateway_id"))
            cur.executemany(f"INSERT INTO {djbench.TABLE} ({cols}) VALUES ({marks})", list(rows))
    sessions = [
        (*wl.session_for(i, SESSIONS), 0, "main", "active", 0, 0, "local") for i in range(SESSIONS)
    ]
    with transaction.atomic(), connection.cursor() as cur:
        cur.executemany(
            "INSERT INTO sessions_app_session (session_key, session_id, epoch, agent_id, "
            "status, created_at, updated_at, gateway_id) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            sessions,
        )
        cur.execute(f"SELECT MIN(id) FROM {djbench.TABLE}")
        first = cur.fetchone()[0]
        step = 100_000
        for start in range(0, events, step):
            stop = min(events, start + step)
            # Nine in ten about a receipt (cycled), one in ten a session event.
            cur.execute(
                f"WITH RECURSIVE g(n) AS (SELECT %s UNION ALL SELECT n + 1 FROM g WHERE n + 1 < %s) "
                f"INSERT INTO {EV} (receipt_id, session_key, created_at, actor, surface, action, "
                "from_status, to_status, outcome, reason, plan_id, details) "
                "SELECT CASE WHEN g.n %% 10 = 9 THEN '' ELSE r.receipt_id END, r.session_key, "
                "1700000000000 + g.n, 'system', 'system', "
                "CASE WHEN g.n %% 10 = 9 THEN 'checkpoint_now' ELSE 'status_change' END, "
                "NULL, r.status, NULL, NULL, NULL, "
                "CAST(CASE WHEN g.n %% 10 = 9 THEN '{\"session_id\": \"' || r.session_id || '\"}' "
                f"ELSE '{{}}' END AS {'jsonb' if postgres else 'text'}) "
                f"FROM g JOIN {djbench.TABLE} r ON r.id = %s + (g.n %% %s)",
                [start, stop, first, receipts],
            )


def second_gateway() -> None:
    from django.db import connection, transaction

    from sessions_app.gateways import ensure_gateway

    with transaction.atomic(), connection.cursor() as cur:
        # sessions_app is at its latest migration here: the gateway row as the app writes it.
        ensure_gateway("edge")
        cur.execute(f"UPDATE {djbench.TABLE} SET gateway_id = 'edge' WHERE id %% 10 = 0", [])
        cur.execute("UPDATE sessions_app_session SET gateway_id = 'edge' WHERE id %% 10 = 0", [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("postgres", "sqlite"), default="sqlite")
    parser.add_argument("--receipts", type=int, default=200_000)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--db-name", default="opensquilla_bench_events")
    args = parser.parse_args()

    url = djbench.fresh_database(args.backend, args.db_name)
    manage(url, "migrate", "receipts_app", "0017")
    djbench.setup_django(url)
    started = time.perf_counter()
    seed(args.receipts, args.events)
    djbench.emit(
        f"seeded {args.receipts:,} receipts and {args.events:,} events "
        f"in {time.perf_counter() - started:.1f} s"
    )
    from django.db import connection

    connection.close()
    one_s = manage(url, "migrate", "receipts_app", "0018")
    djbench.emit(f"{args.backend}: 0018 at {args.events:,} events, one gateway: {one_s:.1f} s")
    manage(url, "migrate", "receipts_app", "0017")
    second_gateway()
    connection.close()
    two_s = manage(url, "migrate", "receipts_app", "0018")
    djbench.emit(f"{args.backend}: 0018 at {args.events:,} events, two gateways: {two_s:.1f} s")
    with connection.cursor() as cur:
        cur.execute(f"SELECT gateway_id, COUNT(*) FROM {EV} GROUP BY gateway_id ORDER BY 1")
        by_gateway = dict(cur.fetchall())
    djbench.emit(f"events per gateway after: {by_gateway}")
    wl.write_result(
        f"event_gateway_migration_{args.backend}",
        {
            "backend": args.backend,
            "receipts": args.receipts,
            "events": args.events,
            "one_gateway_s": round(one_s, 1),
            "two_gateways_s": round(two_s, 1),
            "events_per_gateway": by_gateway,
            "versions": djbench.versions(),
            "machine": wl.machine_info(),
        },
    )


if __name__ == "__main__":
    main()
