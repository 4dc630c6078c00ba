"""``POST /api/v1/receipts/bulk`` on PostgreSQL: sustained receipts per second (target 20,000/s).

gunicorn (2 workers) on 127.0.0.1 with a fresh database; several httpx clients POST batches of
1,000 receipts with an operate-scope Bearer token. For comparison the same batches also go
through ``ledger.bulk_upsert_memory_durable_receipts`` in-process (no HTTP, no JSON), which
is the ceiling the endpoint can reach. If the endpoint is missing, only that is measured.

    .venv/bin/python bench/bulk_api.py [--quick] [--batches 120] [--clients 4]
    .venv/bin/python bench/bulk_api.py --trigger-cost   # in-process, triggers on vs off
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import logging  # noqa: E402

import djbench  # noqa: E402

logging.getLogger("httpx").setLevel(logging.WARNING)
import workload as wl  # noqa: E402

PG_DB = "opensquilla_bench_bulk"
BATCH = 1_000
TARGET = 20_000.0


def batch_rows(tag: str, b: int) -> list[dict]:
    rows = []
    for i in range(b * BATCH, (b + 1) * BATCH):
        row = wl.receipt_row(tag, i, sessions=20_000)
        row.pop("updated_at")
        rows.append(row)
    return rows


def measure_http(url: str, batches: int, clients: int) -> dict:
    import httpx

    from opensquilla_site.tokens import create_api_token

    _, token = create_api_token(user=djbench.make_admin(), name="bench-bulk", scope="operate")
    bodies = [json.dumps({"receipts": batch_rows("http", b)}).encode() for b in range(batches)]
    with djbench.running() as procs:
        port = djbench.free_port()
        djbench.start_gunicorn(procs, url, port, workers=2, tag="bulk")
        base = f"http://127.0.0.1:{port}/api/v1/receipts/bulk"
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        probe = httpx.post(
            base,
            content=json.dumps({"receipts": batch_rows("warm", 0)[:10]}),
            headers=headers,
            timeout=60,
        )
        if probe.status_code == 404:
            return {"available": False, "reason": "POST /api/v1/receipts/bulk answered 404"}
        if probe.status_code != 200:
            raise RuntimeError(f"bulk endpoint answered {probe.status_code}: {probe.text[:500]}")
        latencies: list[float] = []
        failures: list[str] = []
        lock = threading.Lock()
        next_batch = iter(range(batches))

        def client() -> None:
            with httpx.Client(headers=headers, timeout=120) as http:
                while True:
                    with lock:
                        b = next(next_batch, None)
                    if b is None:
                        return
                    s = time.perf_counter()
                    resp = http.post(base, content=bodies[b])
                    took = time.perf_counter() - s
                    with lock:
                        latencies.append(took)
                        if resp.status_code != 200:
                            failures.append(f"{resp.status_code}: {resp.text[:200]}")

        threads = [threading.Thread(target=client) for _ in range(clients)]
        s = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - s
    from receipts_app.models import MemoryDurableReceipt

    stored = MemoryDurableReceipt.objects.filter(idempotency_key__contains=":http:").count()
    summary = wl.summarize(latencies, wall=wall, count=len(latencies))
    return {
        "available": True,
        "batches": batches,
        "batch_size": BATCH,
        "clients": clients,
        "gunicorn_workers": 2,
        "receipts_per_s": round(batches * BATCH / wall, 1),
        "request_latency": summary,
        "failures": failures[:5],
        "failed_requests": len(failures),
        "rows_stored": stored,
    }


def measure_direct(batches: int, *, tag: str = "direct") -> dict:
    from receipts_app import ledger
    from receipts_app.models import MemoryDurableReceipt

    prepared = [batch_rows(tag, b) for b in range(batches)]
    t = wl.Timer()
    with t:
        for rows in prepared:
            s = time.perf_counter()
            ledger.bulk_upsert_memory_durable_receipts([MemoryDurableReceipt(**r) for r in rows])
            t.samples.append(time.perf_counter() - s)
    summary = t.summary()
    return {
        "batches": batches,
        "batch_size": BATCH,
        "receipts_per_s": round(batches * BATCH / t.wall, 1),
        "batch_latency": summary,
    }


COUNT_TRIGGERS = ("osq_receipts_inserted", "osq_receipts_updated", "osq_receipts_deleted")


def trigger_cost(rounds: int, batches: int) -> dict:
    """What the count triggers cost the in-process bulk path: interleaved rounds of the same
    batches with the triggers enabled and disabled (on this benchmark database only; they are
    enabled again afterwards, and the counts it leaves are not checked)."""
    import statistics

    from django.db import connection

    def set_triggers(enabled: bool) -> None:
        verb = "ENABLE" if enabled else "DISABLE"
        with connection.cursor() as cur:
            for name in COUNT_TRIGGERS:
                cur.execute(f"ALTER TABLE {djbench.TABLE} {verb} TRIGGER {name}")

    sides: dict[str, list[float]] = {"with_triggers": [], "without_triggers": []}
    try:
        for r in range(rounds):
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            for side in order:
                set_triggers(side == "with_triggers")
                fig = measure_direct(batches, tag=f"trig-{side}-{r}")
                sides[side].append(fig["batch_latency"]["p50_ms"])
    finally:
        set_triggers(True)
    out = {
        side: {"batch_p50_ms_rounds": v, "median": statistics.median(v)}
        for side, v in sides.items()
    }
    out["ratio_with_over_without"] = round(
        out["with_triggers"]["median"] / out["without_triggers"]["median"], 3
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--batches", type=int, default=120)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument(
        "--trigger-cost",
        action="store_true",
        help="only time the in-process bulk path with the count triggers on and off (3 rounds)",
    )
    args = parser.parse_args()
    if args.quick:
        args.batches = 12
    url = djbench.fresh_database("postgres", PG_DB)
    djbench.setup_django(url)
    if args.trigger_cost:
        cost = trigger_cost(3, max(4, args.batches // 8))
        djbench.emit(
            f"bulk batch p50: {cost['with_triggers']['median']:.1f} ms with the count triggers, "
            f"{cost['without_triggers']['median']:.1f} ms without (x{cost['ratio_with_over_without']})"
        )
        print(f"wrote {wl.write_result('bulk_trigger_cost', {'url': url, **cost})}")
        return
    direct = measure_direct(max(4, args.batches // 4))
    djbench.emit(
        f"direct ledger.bulk_upsert: {direct['receipts_per_s']:.0f} receipts/s (p50 batch {direct['batch_latency']['p50_ms']:.0f} ms)"
    )
    http = measure_http(url, args.batches, args.clients)
    if http.get("available"):
        djbench.emit(
            f"POST /api/v1/receipts/bulk: {http['receipts_per_s']:.0f} receipts/s with {args.clients} clients; "
            f"request p50 {http['request_latency']['p50_ms']:.0f} ms p99 {http['request_latency']['p99_ms']:.0f} ms; "
            f"{http['failed_requests']} failed; target {TARGET:.0f}/s"
        )
    else:
        djbench.emit(f"endpoint not available: {http['reason']}")
    result = {
        "database_url": url,
        "versions": djbench.versions(),
        "machine": wl.machine_info(),
        "quick": args.quick,
        "target_receipts_per_s": TARGET,
        "http": http,
        "direct": direct,
    }
    print(f"wrote {wl.write_result('bulk_api', result)}")


if __name__ == "__main__":
    main()
