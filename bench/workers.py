"""Checkpoint tasks per second through real Celery workers on Redis, 1 and 2 worker processes.

N sessions with short transcripts are created, one ``receipts_app.tasks.checkpoint_session``
is enqueued for each, and the clock stops when all N checkpoint receipts exist. Each worker is
a ``celery worker --concurrency 1`` subprocess (so "2 workers" = 2 processes doing tasks).

    .venv/bin/python bench/workers.py [--quick] [--sessions 600]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import djbench  # noqa: E402
import workload as wl  # noqa: E402

PG_DB = "opensquilla_bench_workers"
MESSAGES = 6


def make_sessions(tag: str, count: int) -> list[str]:
    from sessions_app.models import Session, TranscriptEntry

    keys = [f"agent:{wl.AGENTS[i % len(wl.AGENTS)]}:{tag}-{i:05d}" for i in range(count)]
    sessions = Session.objects.bulk_create(
        [Session(session_key=k, agent_id=k.split(":")[1]) for k in keys], batch_size=2_000
    )
    entries = []
    for s in sessions:
        for m in range(MESSAGES):
            entries.append(
                TranscriptEntry(
                    session_id=s.session_id,
                    session_key=s.session_key,
                    role="user" if m % 2 == 0 else "assistant",
                    content=f"message {m} of {s.session_key}: " + "lorem ipsum " * 20,
                    created_at=wl.BASE_MS + m,
                )
            )
    TranscriptEntry.objects.bulk_create(entries, batch_size=5_000)
    return keys


def run(url: str, n_workers: int, count: int, timeout_s: float) -> dict:
    from django.db.models import Count

    from receipts_app import tasks
    from receipts_app.models import MemoryDurableReceipt

    tag = f"w{n_workers}"
    keys = make_sessions(tag, count)
    djbench.flush_redis()
    with djbench.running() as procs:
        djbench.start_workers(procs, url, n_workers, tag=tag)
        djbench.wait_workers_ready(n_workers)
        done_q = MemoryDurableReceipt.objects.filter(
            scope="checkpoint", session_key__contains=f":{tag}-"
        )
        s = time.perf_counter()
        for key in keys:
            tasks.checkpoint_session.delay(key)
        enqueued_s = time.perf_counter() - s
        done = 0
        while time.perf_counter() - s < timeout_s:
            done = done_q.count()
            if done >= count:
                break
            time.sleep(0.1)
        wall = time.perf_counter() - s
        statuses = dict(
            done_q.order_by()
            .values_list("status")
            .annotate(n=Count("id"))
            .values_list("status", "n")
        )
    djbench.flush_redis()
    return {
        "workers": n_workers,
        "tasks": count,
        "completed": done,
        "wall_s": round(wall, 2),
        "enqueue_s": round(enqueued_s, 3),
        "tasks_per_s": round(done / wall, 1),
        "statuses": statuses,
        "finished": done >= count,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sessions", type=int, default=600)
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    if args.quick:
        args.sessions = 60
    url = djbench.fresh_database("postgres", PG_DB)
    djbench.setup_django(url)
    runs = []
    for n in (1, 2):
        r = run(url, n, args.sessions, args.timeout)
        runs.append(r)
        djbench.emit(
            f"{n} worker process(es): {r['completed']}/{r['tasks']} checkpoints in {r['wall_s']} s "
            f"= {r['tasks_per_s']} tasks/s {r['statuses']}"
        )
    result = {
        "database_url": url,
        "broker": djbench.REDIS_URL,
        "versions": djbench.versions(),
        "machine": wl.machine_info(),
        "quick": args.quick,
        "messages_per_session": MESSAGES,
        "runs": runs,
    }
    print(f"wrote {wl.write_result('workers', result)}")


if __name__ == "__main__":
    main()
