"""The ledger workload against the reference: PyPI ``opensquilla==0.3.0``'s ``SessionStorage``.

Runs inside ``var/bench/ref-venv`` (Python 3.12); started with any other interpreter it
creates that venv (``bench/reference_venv.sh``) and re-executes itself there. Seeding to the
200,000-row ledger is bulk SQL straight into the reference's own SQLite file (its schema is
created by ``SessionStorage.open``); only the ledger operations are timed.

    .venv/bin/python bench/reference_ledger.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload as wl  # noqa: E402

REF_VENV = wl.RESULTS_DIR / "ref-venv"
REF_PYTHON = REF_VENV / "bin" / "python"


def _ensure_reference_interpreter() -> None:
    try:
        import opensquilla.session.storage  # noqa: F401
    except ImportError:
        subprocess.run(["bash", str(wl.ROOT / "bench" / "reference_venv.sh")], check=True)
        os.execv(str(REF_PYTHON), [str(REF_PYTHON), __file__, *sys.argv[1:]])


def _fresh_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def seed(db_path: Path, count: int) -> float:
    """Bulk-insert ``count`` seed rows with plain sqlite3 (untimed for the comparison)."""
    t0 = time.perf_counter()
    conn = sqlite3.connect(db_path)
    cols = ", ".join(wl.RECEIPT_COLUMNS)
    marks = ", ".join("?" for _ in wl.RECEIPT_COLUMNS)
    sql = f"INSERT INTO memory_durable_receipts ({cols}) VALUES ({marks})"
    with conn:
        batch: list[tuple] = []
        for i in range(count):
            row = wl.receipt_row("seed", i)
            batch.append(tuple(row[c] for c in wl.RECEIPT_COLUMNS))
            if len(batch) == 10_000:
                conn.executemany(sql, batch)
                batch.clear()
        if batch:
            conn.executemany(sql, batch)
    conn.close()
    return time.perf_counter() - t0


async def run(sizes: dict[str, int]) -> dict:
    from opensquilla import __version__ as ref_version  # type: ignore[attr-defined]
    from opensquilla.session.models import MemoryDurableReceipt
    from opensquilla.session.storage import SessionStorage

    db_path = wl.RESULTS_DIR / "reference_ledger.sqlite3"
    wl.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    _fresh_db(db_path)
    storage = await SessionStorage.open(str(db_path))
    ops: dict[str, dict] = {}
    try:
        n = sizes["upserts"]
        t = wl.Timer()
        with t:
            for i in range(n):
                s = time.perf_counter()
                await storage.upsert_memory_durable_receipt(
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
                await storage.upsert_memory_durable_receipt(MemoryDurableReceipt(**row))
                t.samples.append(time.perf_counter() - s)
        ops["upsert_conflict"] = t.summary()

        seed_count = sizes["ledger_rows"] - n
        seed_s = seed(db_path, seed_count)

        probes = [
            wl.coverage_probe(wl.receipt_row("seed", i))
            for i in wl.probe_indexes(seed_count, sizes["lookups"])
        ]
        t = wl.Timer()
        with t:
            for probe in probes:
                s = time.perf_counter()
                found = await storage.list_memory_durable_receipts(**probe)
                t.samples.append(time.perf_counter() - s)
                assert len(found) == 1, probe
        ops["coverage_lookup"] = t.summary()

        t = wl.Timer()
        with t:
            for _ in range(sizes["status_lists"]):
                s = time.perf_counter()
                rows = await storage.list_memory_durable_receipts(
                    status=wl.LISTED_STATUS, limit=100
                )
                t.samples.append(time.perf_counter() - s)
                assert len(rows) == 100
        ops["list_by_status"] = t.summary()

        t = wl.Timer()
        with t:
            for i in range(sizes["updates"]):
                s = time.perf_counter()
                await storage.update_memory_durable_receipt(
                    wl._uuid_for("rid-upsert", i % n),
                    status="repair_pending",
                    reason="requeued by bench",
                    attempt_count=0,
                )
                t.samples.append(time.perf_counter() - s)
        ops["status_update"] = t.summary()
    finally:
        await storage.close()
    return {
        "implementation": f"opensquilla {ref_version} SessionStorage (aiosqlite, WAL)",
        "backend": "sqlite",
        "sizes": sizes,
        "seed_s": round(seed_s, 2),
        "ops": ops,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    args = parser.parse_args()
    _ensure_reference_interpreter()
    sizes = wl.QUICK if args.quick else wl.FULL
    result = asyncio.run(run(dict(sizes)))
    result["machine"] = wl.machine_info()
    result["quick"] = args.quick
    path = wl.write_result("reference_ledger", result)
    for name, figures in result["ops"].items():
        print(f"reference {name:18s} {figures}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
