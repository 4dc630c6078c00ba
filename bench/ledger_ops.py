"""The ledger operations side by side: ours (SQLite and PostgreSQL) against the reference.

Same rows (``bench/workload.py``), same order of operations, one run:
20,000 distinct upserts; 20,000 conflicting re-upserts; the exact coverage lookup and list by
status (limit 100) on a 200,000-row ledger; 10,000 status updates.

    .venv/bin/python bench/ledger_ops.py [--quick] [--backends sqlite,postgres] [--no-reference]

Each backend runs in its own process (Django takes one DATABASE_URL per process), in a fresh
database: ``var/bench/ledger_ops.sqlite3`` and PostgreSQL ``opensquilla_bench``.
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

# Targets from the issue: ours / reference.
TARGETS = {
    "upsert_distinct": ("rate", 3.0),
    "upsert_conflict": ("rate", 3.0),
    "status_update": ("rate", 3.0),
    "list_by_status": ("latency", 10.0),
    "coverage_lookup": ("latency", 1.0),
}
PG_DB = "opensquilla_bench"


def measure(backend: str, sizes: dict[str, int]) -> dict:
    import djbench

    name = PG_DB if backend == "postgres" else "ledger_ops"
    url = djbench.fresh_database(backend, name)
    djbench.setup_django(url)

    from receipts_app import ledger
    from receipts_app.models import MemoryDurableReceipt

    ops: dict[str, dict] = {}
    n = sizes["upserts"]
    t = wl.Timer()
    with t:
        for i in range(n):
            s = time.perf_counter()
            ledger.upsert_memory_durable_receipt(
                MemoryDurableReceipt(**wl.receipt_row("upsert", i))
            )
            t.samples.append(time.perf_counter() - s)
    ops["upsert_distinct"] = t.summary()

    t = wl.Timer()
    with t:
        for i in range(sizes["conflicts"]):
            row = wl.receipt_row("upsert", i % n)
            row.update(
                receipt_id=wl._uuid_for("rid-conflict", i),
                status="repair_failed",
                reason="replayed",
                attempt_count=row["attempt_count"] + 1,
            )
            s = time.perf_counter()
            stored = ledger.upsert_memory_durable_receipt(MemoryDurableReceipt(**row))
            t.samples.append(time.perf_counter() - s)
    assert stored.receipt_id == wl._uuid_for("rid-upsert", (sizes["conflicts"] - 1) % n)
    ops["upsert_conflict"] = t.summary()

    seed_count = sizes["ledger_rows"] - n
    s = time.perf_counter()
    djbench.bulk_seed(wl.receipt_row("seed", i) for i in range(seed_count))
    seed_s = time.perf_counter() - s

    probes = [
        wl.coverage_probe(wl.receipt_row("seed", i))
        for i in wl.probe_indexes(seed_count, sizes["lookups"])
    ]
    t = wl.Timer()
    with t:
        for probe in probes:
            s = time.perf_counter()
            found = ledger.list_memory_durable_receipts(**probe)
            t.samples.append(time.perf_counter() - s)
            assert len(found) == 1, probe
    ops["coverage_lookup"] = t.summary()

    t = wl.Timer()
    with t:
        for _ in range(sizes["status_lists"]):
            s = time.perf_counter()
            rows = ledger.list_memory_durable_receipts(status=wl.LISTED_STATUS, limit=100)
            t.samples.append(time.perf_counter() - s)
            assert len(rows) == 100
    ops["list_by_status"] = t.summary()

    t = wl.Timer()
    with t:
        for i in range(sizes["updates"]):
            s = time.perf_counter()
            ledger.update_memory_durable_receipt(
                wl._uuid_for("rid-upsert", i % n),
                status="repair_pending",
                reason="requeued by bench",
                attempt_count=0,
            )
            t.samples.append(time.perf_counter() - s)
    ops["status_update"] = t.summary()
    return {
        "implementation": "opensquilla-site receipts_app.ledger (Django ORM)",
        "backend": backend,
        "database_url": url,
        "versions": djbench.versions(),
        "sizes": sizes,
        "seed_s": round(seed_s, 2),
        "ops": ops,
    }


def compare(ours: dict, ref: dict) -> dict:
    """ours/reference per operation: a rate ratio for writes, a speed-up for reads."""
    out = {}
    for op, (kind, target) in TARGETS.items():
        mine, theirs = ours["ops"].get(op), ref["ops"].get(op)
        if not mine or not theirs:
            continue
        if kind == "rate":
            ratio = mine["ops_per_s"] / theirs["ops_per_s"]
            label = "rate ours/reference"
        else:
            ratio = theirs["p50_ms"] / mine["p50_ms"]
            label = "speed-up (reference p50 / ours p50)"
        out[op] = {
            "ratio": round(ratio, 2),
            "meaning": label,
            "target": target,
            "met": ratio >= target,
        }
    return out


def _child(args: list[str]) -> dict:
    subprocess.run([sys.executable, __file__, *args], check=True)
    return {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--backend", help=argparse.SUPPRESS)  # child mode: one backend
    parser.add_argument("--no-reference", action="store_true", help="reuse the last reference run")
    args = parser.parse_args()
    sizes = dict(wl.QUICK if args.quick else wl.FULL)
    if args.backend:
        result = measure(args.backend, sizes)
        result["quick"] = args.quick
        wl.write_result(f"ledger_ops_{args.backend}", result)
        for name, figures in result["ops"].items():
            print(f"ours[{args.backend}] {name:18s} {figures}", flush=True)
        return

    quick = ["--quick"] if args.quick else []
    if not args.no_reference:
        subprocess.run(
            [sys.executable, str(Path(__file__).parent / "reference_ledger.py"), *quick], check=True
        )
    ref = json.loads((wl.RESULTS_DIR / "reference_ledger.json").read_text())
    combined: dict = {"reference": ref, "ours": {}, "ratios": {}, "quick": args.quick}
    for backend in [b.strip() for b in args.backends.split(",") if b.strip()]:
        subprocess.run([sys.executable, __file__, "--backend", backend, *quick], check=True)
        ours = json.loads((wl.RESULTS_DIR / f"ledger_ops_{backend}.json").read_text())
        combined["ours"][backend] = ours
        combined["ratios"][backend] = compare(ours, ref)
    combined["machine"] = wl.machine_info()
    path = wl.write_result("ledger_ops", combined)
    print()
    print(
        f"{'operation':18s} {'reference':>22s} " + " ".join(f"{b:>34s}" for b in combined["ours"])
    )
    for op in TARGETS:
        r = ref["ops"][op]
        cells = []
        for backend, ours in combined["ours"].items():
            m = ours["ops"][op]
            c = combined["ratios"][backend][op]
            mark = "ok" if c["met"] else "MISS"
            cells.append(
                f"{m['ops_per_s']:>9.0f}/s p50 {m['p50_ms']:>7.3f}ms x{c['ratio']:<5} {mark:4s}"
            )
        print(f"{op:18s} {r['ops_per_s']:>9.0f}/s p50 {r['p50_ms']:>7.3f}ms " + " ".join(cells))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
