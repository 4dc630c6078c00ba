"""Experiment, not product code: how much the proposed fewer-round-trip ledger SQL would gain.

Runs the current ``receipts_app.ledger`` functions and hand-written equivalents (same effects:
upsert keeping receipt_id/created_at, audit event on a status change, stored row returned)
alternately in blocks on the same database, so both see the same machine load. The figures
quantify the fixes described in docs/PERFORMANCE.md; the product code is unchanged.

    .venv/bin/python bench/prototype_ledger.py [--quick] [--backends sqlite,postgres]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload as wl  # noqa: E402

T = "receipts_app_memorydurablereceipt"
EV = "receipts_app_receiptevent"
# Every row is local's: the ledger is keyed by (gateway, idempotency key) since the gateways.
COLS = (*wl.RECEIPT_COLUMNS, "agent_id", "resolved_by_receipt_id", "gateway_id")
UPDATE_COLS = [
    c for c in COLS if c not in ("receipt_id", "idempotency_key", "created_at", "gateway_id")
]
EV_COLS = "receipt_id, session_key, gateway_id, created_at, actor, surface, action, from_status, to_status, reason, details"
KEY = "gateway_id = 'local' AND idempotency_key"


def _row_values(row: dict) -> list:
    from sessions_app.keys import agent_id_for_session_key

    return [
        *(row[c] for c in wl.RECEIPT_COLUMNS),
        agent_id_for_session_key(row["session_key"]) or "",
        None,
        "local",
    ]


def raw_upsert(vendor: str, row: dict) -> tuple:
    from django.db import connection, transaction

    from opensquilla_site.timeutil import now_ms

    row = dict(row, updated_at=now_ms())
    values = _row_values(row)
    marks = ", ".join(["%s"] * len(COLS))
    sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in UPDATE_COLS)
    with transaction.atomic(), connection.cursor() as cur:
        if vendor == "postgresql":
            cur.execute(
                f"WITH prior AS (SELECT status FROM {T} WHERE {KEY} = %s FOR UPDATE), "
                f"up AS (INSERT INTO {T} ({', '.join(COLS)}) VALUES ({marks}) "
                f"ON CONFLICT (gateway_id, idempotency_key) DO UPDATE SET {sets} RETURNING *), "
                f"ev AS (INSERT INTO {EV} ({EV_COLS}) SELECT up.receipt_id, up.session_key, 'local', "
                f"up.updated_at, 'system', 'system', 'status_change', prior.status, up.status, "
                f'up.reason, \'{{"via": "upsert"}}\'::jsonb FROM up, prior '
                f"WHERE prior.status IS DISTINCT FROM up.status) SELECT * FROM up",
                [row["idempotency_key"], *values],
            )
            return cur.fetchone()
        cur.execute(f"SELECT status FROM {T} WHERE {KEY} = %s", [row["idempotency_key"]])
        prior = cur.fetchone()
        cur.execute(
            f"INSERT INTO {T} ({', '.join(COLS)}) VALUES ({marks}) "
            f"ON CONFLICT (gateway_id, idempotency_key) DO UPDATE SET {sets} RETURNING *",
            values,
        )
        stored = cur.fetchone()
        if prior is not None and prior[0] != row["status"]:
            cur.execute(
                f"INSERT INTO {EV} ({EV_COLS}) VALUES (%s, %s, 'local', %s, 'system', 'system', "
                "'status_change', %s, %s, %s, '{\"via\": \"upsert\"}')",
                [
                    stored[[d[0] for d in cur.description].index("receipt_id")],
                    row["session_key"],
                    row["updated_at"],
                    prior[0],
                    row["status"],
                    row["reason"],
                ],
            )
        return stored


def raw_update(vendor: str, receipt_id: str, **fields) -> tuple:
    from django.db import connection, transaction

    from opensquilla_site.timeutil import now_ms

    fields.setdefault("updated_at", now_ms())
    names = list(fields)
    with transaction.atomic(), connection.cursor() as cur:
        if vendor == "postgresql":
            sets = ", ".join(f"{n} = %s" for n in names)
            cur.execute(
                f"WITH prior AS (SELECT id, status FROM {T} WHERE receipt_id = %s FOR UPDATE), "
                f"upd AS (UPDATE {T} t SET {sets} FROM prior WHERE t.id = prior.id "
                f"RETURNING t.*, prior.status AS prior_status), "
                f"ev AS (INSERT INTO {EV} ({EV_COLS}) SELECT receipt_id, session_key, gateway_id, updated_at, "
                f"'system', 'system', 'status_change', prior_status, status, reason, '{{}}'::jsonb "
                f"FROM upd WHERE prior_status IS DISTINCT FROM status) SELECT * FROM upd",
                [receipt_id, *fields.values()],
            )
            row = cur.fetchone()
        else:
            cur.execute(f"SELECT status FROM {T} WHERE receipt_id = %s", [receipt_id])
            prior = cur.fetchone()
            if prior is None:
                raise KeyError(receipt_id)
            sets = ", ".join(f"{n} = %s" for n in names)
            cur.execute(
                f"UPDATE {T} SET {sets} WHERE receipt_id = %s RETURNING *",
                [*fields.values(), receipt_id],
            )
            row = cur.fetchone()
            if "status" in fields and prior[0] != fields["status"]:
                cur.execute(
                    f"INSERT INTO {EV} ({EV_COLS}) VALUES (%s, %s, 'local', %s, 'system', 'system', "
                    "'status_change', %s, %s, %s, '{}')",
                    [
                        receipt_id,
                        row[2],
                        fields["updated_at"],
                        prior[0],
                        fields["status"],
                        fields.get("reason"),
                    ],
                )
        if row is None:
            raise KeyError(receipt_id)
        return row


def raw_coverage(probe: dict):
    from django.db import connection

    from receipts_app.models import MemoryDurableReceipt

    names = [f.attname for f in MemoryDurableReceipt._meta.concrete_fields]
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT {', '.join(names)} FROM {T} WHERE session_key = %s AND session_id = %s "
            "AND scope = %s AND status = %s AND coverage_turn_id = %s AND coverage_hash = %s "
            "AND coverage_entry_count = %s ORDER BY created_at, id LIMIT 1",
            [
                probe[k]
                for k in (
                    "session_key",
                    "session_id",
                    "scope",
                    "status",
                    "coverage_turn_id",
                    "coverage_hash",
                    "coverage_entry_count",
                )
            ],
        )
        rows = cur.fetchall()
    return [MemoryDurableReceipt.from_db("default", names, r) for r in rows]


def _alternate(n: int, block: int, current, proposed) -> dict:
    """Run ``current(i)`` and ``proposed(i)`` in alternating blocks; time each call."""
    samples = {"current": [], "proposed": []}
    walls = {"current": 0.0, "proposed": 0.0}
    for start in range(0, n, block):
        for name, fn in (("current", current), ("proposed", proposed)):
            s0 = time.perf_counter()
            for i in range(start, min(n, start + block)):
                s = time.perf_counter()
                fn(i)
                samples[name].append(time.perf_counter() - s)
            walls[name] += time.perf_counter() - s0
    out = {k: wl.summarize(samples[k], wall=walls[k], count=len(samples[k])) for k in samples}
    out["gain_rate"] = round(out["proposed"]["ops_per_s"] / out["current"]["ops_per_s"], 2)
    out["gain_p50"] = round(out["current"]["p50_ms"] / out["proposed"]["p50_ms"], 2)
    return out


def measure(backend: str, quick: bool) -> dict:
    import djbench

    n = 1_000 if quick else 5_000
    ledger_rows = 20_000 if quick else 200_000
    url = djbench.fresh_database(
        backend, "opensquilla_bench_proto" if backend == "postgres" else "proto"
    )
    djbench.setup_django(url)
    from django.db import connection

    from receipts_app import ledger
    from receipts_app.models import MemoryDurableReceipt

    vendor = connection.vendor
    djbench.bulk_seed(wl.receipt_row("seed", i) for i in range(ledger_rows))
    res = {}
    res["upsert_distinct"] = _alternate(
        n,
        250,
        lambda i: ledger.upsert_memory_durable_receipt(
            MemoryDurableReceipt(**wl.receipt_row("orm", i))
        ),
        lambda i: raw_upsert(vendor, wl.receipt_row("raw", i)),
    )

    def conflict(tag: str, i: int) -> dict:
        row = wl.receipt_row(tag, i)
        row.update(
            receipt_id=wl._uuid_for(f"c-{tag}", i), status="repair_failed", reason="replayed"
        )
        return row

    res["upsert_conflict"] = _alternate(
        n,
        250,
        lambda i: ledger.upsert_memory_durable_receipt(MemoryDurableReceipt(**conflict("orm", i))),
        lambda i: raw_upsert(vendor, conflict("raw", i)),
    )
    res["status_update"] = _alternate(
        n,
        250,
        lambda i: ledger.update_memory_durable_receipt(
            wl._uuid_for("rid-orm", i), status="repair_pending", reason="r", attempt_count=0
        ),
        lambda i: raw_update(
            vendor, wl._uuid_for("rid-raw", i), status="repair_pending", reason="r", attempt_count=0
        ),
    )
    probes = [
        wl.coverage_probe(wl.receipt_row("seed", i)) for i in wl.probe_indexes(ledger_rows, 2_000)
    ]
    res["coverage_lookup"] = _alternate(
        len(probes),
        250,
        lambda i: ledger.list_memory_durable_receipts(**probes[i]),
        lambda i: raw_coverage(probes[i]),
    )
    return {"backend": backend, "operations": n, "ledger_rows": ledger_rows, "results": res}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.backend:
        out = measure(args.backend, args.quick)
        wl.write_result(f"prototype_ledger_{args.backend}", out)
        for op, r in out["results"].items():
            print(
                f"{args.backend:8s} {op:16s} current {r['current']['ops_per_s']:>8.0f}/s p50 {r['current']['p50_ms']:.3f} ms | "
                f"proposed {r['proposed']['ops_per_s']:>8.0f}/s p50 {r['proposed']['p50_ms']:.3f} ms | "
                f"gain x{r['gain_rate']} (p50 x{r['gain_p50']})",
                flush=True,
            )
        return
    combined = {"quick": args.quick, "machine": wl.machine_info(), "backends": {}}
    for b in [x for x in args.backends.split(",") if x]:
        subprocess.run(
            [sys.executable, __file__, "--backend", b, *(["--quick"] if args.quick else [])],
            check=True,
        )
        combined["backends"][b] = json.loads(
            (wl.RESULTS_DIR / f"prototype_ledger_{b}.json").read_text()
        )
    print(f"wrote {wl.write_result('prototype_ledger', combined)}")


if __name__ == "__main__":
    main()
