"""Concurrent writers, side by side, in interleaved rounds (issue 14).

Sides, each run for ``--seconds`` per round, in a rotating order:
- ``reference``: PyPI opensquilla 0.3.0, 8 asyncio tasks sharing one ``SessionStorage``
  (aiosqlite, SQLite's default ``synchronous=FULL``), each upserting new receipts in a loop:
  the reference's best concurrent shape (one connection; more tasks only queue on it);
- ``ours``: ``PUT /api/v1/receipts`` under gunicorn (``--gunicorn-workers``, kept
  connections) on PostgreSQL (``synchronous_commit=on``), driven by ``wrk`` with
  ``--connections`` (16) concurrent writers on loopback, every request a new idempotency key.

Before the rounds, the in-process figure: ``PUT /api/v1/receipts`` through Django's test
``Client`` in this process on a kept PostgreSQL connection (p50 of ``--inprocess`` calls;
target <= 2 ms). Targets: ours >= 5x the reference's rate of the same round.

A third side, ``ours_threads`` (``--threads 16``): 16 threads in this process writing through
``receipts_app.ledger`` on their own kept connections, no HTTP: the reference's in-process
shape. PostgreSQL's ``commit_delay`` is measured by running the whole benchmark again with
``PGOPTIONS='-c commit_delay=200 -c commit_siblings=4'`` (libpq passes it to every connection,
gunicorn's included; setting it needs a superuser, as the local ``postgres`` role is).

    .venv/bin/python bench/concurrent_writers.py [--rounds 3] [--seconds 10] [--connections 16]
        [--threads 16] [--name concurrent_writers]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import djbench  # noqa: E402
import workload as wl  # noqa: E402
from api_load import PUT_LUA, run_wrk  # noqa: E402

PG_DB = "opensquilla_bench_concurrent"
REF_PYTHON = HERE.parent / "var" / "bench" / "ref-venv" / "bin" / "python"
REFERENCE_TASKS = 8

# Runs in the reference venv: 8 tasks, one SessionStorage, a fixed time; prints JSON.
REFERENCE_CHILD = r"""
import asyncio, json, sys, time, uuid
from opensquilla.session.models import MemoryDurableReceipt
from opensquilla.session.storage import SessionStorage

path, seconds, tasks = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])

async def main():
    storage = await SessionStorage.open(path)
    done = 0
    stop = time.perf_counter() + seconds

    async def writer(tid):
        nonlocal done
        n = 0
        while time.perf_counter() < stop:
            n += 1
            s = n % 500
            await storage.upsert_memory_durable_receipt(MemoryDurableReceipt(
                receipt_id=str(uuid.uuid4()), session_key=f"agent:main:ref-{s}",
                session_id=f"sid-{s}", scope="checkpoint", status="checkpoint_saved",
                idempotency_key=f"ref:{tid}:{n}", coverage_entry_count=n % 200))
            done += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(writer(t) for t in range(tasks)))
    wall = time.perf_counter() - t0
    await storage.close()
    print(json.dumps({"writes": done, "seconds": wall, "rate": done / wall}))

asyncio.run(main())
"""


def reference_round(seconds: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(  # noqa: S603 - our own venv, fixed argv
            [str(REF_PYTHON), "-c", REFERENCE_CHILD, f"{tmp}/sessions.db", str(seconds)]
            + [str(REFERENCE_TASKS)],
            capture_output=True,
            text=True,
            check=True,
        )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return {"rate": round(result["rate"], 1), "writes": result["writes"]}


def ours_round(url: str, lua: Path, seconds: int, connections: int) -> dict:
    result = run_wrk(url, duration=seconds, connections=connections, extra=["-s", str(lua)])
    return {
        "rate": result["requests_per_s"],
        "p50_ms": result.get("p50_ms"),
        "p99_ms": result.get("p99_ms"),
        "non_2xx": result.get("non_2xx", 0),
    }


def threads_round(threads: int, seconds: float) -> dict:
    """``threads`` Python threads, each on its own kept PostgreSQL connection, upserting new
    receipts through ``receipts_app.ledger`` for ``seconds``: ours at the ledger's level, the
    shape of the reference's in-process tasks (no HTTP). Commits are the database's to share
    (PostgreSQL's group commit; ``commit_delay`` through PGOPTIONS, see --help)."""
    import threading

    from django.db import connection

    from receipts_app import ledger
    from receipts_app.models import MemoryDurableReceipt

    done = [0] * threads
    stop = time.perf_counter() + seconds
    run = time.time_ns()

    def writer(tid: int) -> None:
        n = 0
        try:
            while time.perf_counter() < stop:
                n += 1
                s = n % 500
                ledger.upsert_memory_durable_receipt(
                    MemoryDurableReceipt(
                        session_key=f"agent:main:thr-{s}",
                        session_id=f"sid-{s}",
                        scope="checkpoint",
                        status="checkpoint_saved",
                        idempotency_key=f"thr:{run}:{tid}:{n}",
                        coverage_entry_count=n % 200,
                    )
                )
                done[tid] += 1
        finally:
            connection.close()

    t0 = time.perf_counter()
    workers = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    wall = time.perf_counter() - t0
    return {"rate": round(sum(done) / wall, 1), "writes": sum(done)}


def in_process_put(token: str, calls: int) -> dict:
    """``PUT /api/v1/receipts`` through the test Client, kept connection: server time."""
    from django.test import Client

    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    samples = []
    for i in range(calls + 50):
        body = {
            "session_key": f"agent:main:inproc-{i % 500}",
            "session_id": f"sid-{i % 500}",
            "scope": "checkpoint",
            "idempotency_key": f"inproc:{time.time_ns()}:{i}",
            "status": "checkpoint_saved",
            "coverage_entry_count": i % 200,
        }
        s = time.perf_counter()
        response = client.put(
            "/api/v1/receipts", data=json.dumps(body), content_type="application/json"
        )
        elapsed = time.perf_counter() - s
        assert response.status_code in (200, 201), response.content[:300]
        if i >= 50:  # the first calls warm the kept connection and the prepared statements
            samples.append(elapsed)
    samples.sort()
    return {
        "calls": calls,
        "p50_ms": round(samples[len(samples) // 2] * 1000, 3),
        "p90_ms": round(samples[int(len(samples) * 0.9)] * 1000, 3),
    }


def summary(values: list[float], digits: int = 1) -> dict:
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--gunicorn-workers", type=int, default=4)
    parser.add_argument("--inprocess", type=int, default=2000)
    parser.add_argument(
        "--threads",
        type=int,
        default=16,
        help="also run this many in-process ledger writer threads per round (0: skip)",
    )
    parser.add_argument("--name", default="concurrent_writers", help="var/bench/<name>.json")
    args = parser.parse_args()
    if not REF_PYTHON.exists():
        raise SystemExit(f"no reference venv at {REF_PYTHON}: run bash bench/reference_venv.sh")
    os.environ.setdefault("DATABASE_CONN_MAX_AGE", "600")
    url = djbench.fresh_database("postgres", PG_DB)
    djbench.setup_django(url)
    from opensquilla_site.tokens import create_api_token

    admin = djbench.make_admin()
    _, token = create_api_token(user=admin, name="bench-operate", scope="operate")
    inproc = in_process_put(token, args.inprocess)
    djbench.emit(f"in-process PUT p50 {inproc['p50_ms']} ms (p90 {inproc['p90_ms']} ms)")

    lua = wl.RESULTS_DIR / "wrk_put_concurrent.lua"
    lua.write_text(PUT_LUA % {"token": token, "run": str(int(time.time()))})
    port = djbench.free_port()
    rounds = []
    with djbench.running() as procs:
        djbench.start_gunicorn(procs, url, port, workers=args.gunicorn_workers, tag="concurrent")
        base = f"http://127.0.0.1:{port}"
        run_wrk(base, duration=2, connections=args.connections, extra=["-s", str(lua)])  # warm
        for n in range(args.rounds):
            order = ["reference", "ours"] + (["ours_threads"] if args.threads else [])
            order = order[n % len(order) :] + order[: n % len(order)]  # rotate
            this = {}
            for side in order:
                if side == "reference":
                    this[side] = reference_round(args.seconds)
                elif side == "ours_threads":
                    this[side] = threads_round(args.threads, args.seconds)
                else:
                    this[side] = ours_round(base, lua, args.seconds, args.connections)
                djbench.emit(f"round {n + 1} {side:10s} {this[side]}")
            this["ratio"] = round(this["ours"]["rate"] / this["reference"]["rate"], 2)
            if args.threads:
                this["ratio_threads"] = round(
                    this["ours_threads"]["rate"] / this["reference"]["rate"], 2
                )
            rounds.append(this)
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SHOW synchronous_commit")
        sync = cur.fetchone()[0]
        cur.execute("SHOW commit_delay")
        commit_delay = cur.fetchone()[0]
    result = {
        "machine": wl.machine_info(),
        "versions": djbench.versions(),
        "settings": {
            "connections": args.connections,
            "gunicorn_workers": args.gunicorn_workers,
            "reference_tasks": REFERENCE_TASKS,
            "seconds": args.seconds,
            "durability": {"ours": f"synchronous_commit={sync}", "reference": "SQLite FULL"},
            "commit_delay": commit_delay,
            "threads": args.threads,
        },
        "in_process_put": inproc,
        "rounds": rounds,
        "reference_rate": summary([r["reference"]["rate"] for r in rounds]),
        "ours_rate": summary([r["ours"]["rate"] for r in rounds]),
        "ratio": summary([r["ratio"] for r in rounds], digits=2),
        **(
            {
                "ours_threads_rate": summary([r["ours_threads"]["rate"] for r in rounds]),
                "ratio_threads": summary([r["ratio_threads"] for r in rounds], digits=2),
            }
            if args.threads
            else {}
        ),
        "targets": {"ratio_min": 5.0, "in_process_put_p50_ms": 2.0},
    }
    djbench.emit(
        f"reference {result['reference_rate']} writes/s, ours {result['ours_rate']} writes/s, "
        f"ours/reference {result['ratio']} (target >= 5)"
    )
    if args.threads:
        djbench.emit(
            f"ours, {args.threads} ledger threads: {result['ours_threads_rate']} writes/s, "
            f"ours/reference {result['ratio_threads']}"
        )
    path = wl.write_result(args.name, result)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
