"""The embedded broker's throughput: tasks per second through one worker on the SQLite file.

The embedded default's broker (``opensquilla_site/embedded_broker.py``: kombu's SQL transport
on ``celery-broker.sqlite3``) in a fresh folder under ``var/bench/embedded_broker``, with a
fresh SQLite database beside it, and real ``celery worker`` processes:

1. ``trivial``: ``--tasks`` messages of a task that does nothing are published first; then one
   worker (``--concurrency 1``: one process doing tasks) starts, and the clock runs from its
   "ready" until its log shows every task done: the broker's own cost per message.
2. ``requeue``: ``--receipts`` ``checkpoint_failed`` receipts on live sessions (6 messages of
   transcript each) are requeued in bulk, one requeue plan as the console's bulk requeue
   makes it, and run by the Procfile's worker (``--concurrency 2``); the clock runs from the
   plan's start until every receipt is ``checkpoint_recovered`` (each a real checkpoint).

    .venv/bin/python bench/embedded_broker.py [--tasks 2000] [--receipts 1000] [--name NAME]

Results: ``var/bench/<name>.json`` (default ``embedded_broker``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import djbench  # noqa: E402
import workload as wl  # noqa: E402

NOOP = "bench.embedded_broker.noop"
QUEUE = "bench-embedded"
WORKER_ENV = "OPENSQUILLA_BENCH_EMBEDDED_WORKER"
ACTOR = ("bench", "cli")
# The goals (issue 28): one worker process takes at least this many trivial tasks a second,
# and a bulk requeue of 1,000 receipts on the embedded default is done within this.
GOAL_TASKS_PER_S = 100
GOAL_REQUEUE_S = 60

# Imported by the bench's own worker (``celery -A bench.embedded_broker``): the project's app
# with one task that does nothing, so the figure is the broker's cost and the worker's alone.
if os.environ.get(WORKER_ENV):
    from opensquilla_site.celery import app

    @app.task(name=NOOP, ignore_result=True)
    def noop(index: int) -> None:
        return None


def folder() -> Path:
    return wl.RESULTS_DIR / "embedded_broker"


def environment(database_url: str) -> dict[str, str]:
    var = folder() / "var"
    return djbench.base_env(
        database_url,
        CELERY_BROKER_URL=f"sqlite:///{var / 'celery-broker.sqlite3'}",
        OPENSQUILLA_VAR_DIR=str(var),
        OPENSQUILLA_ENV_FILE="",
        OPENSQUILLA_CHECKPOINT_WORKSPACE=str(folder() / "workspace"),
        OPENSQUILLA_MEMORY_WORKSPACE=str(folder() / "workspace"),
        OPENSQUILLA_FLUSH_PROVIDER="none",
        CELERY_SKIP_CHECKS="1",
        CELERY_TASK_ALWAYS_EAGER="0",
        PYTHONPATH=str(wl.ROOT),
    )


def prepare() -> str:
    """A fresh folder, database and broker file; Django set up in this process for them."""
    shutil.rmtree(folder(), ignore_errors=True)
    (folder() / "var").mkdir(parents=True)
    (folder() / "workspace").mkdir()
    url = djbench.sqlite_url(folder() / "ledger.sqlite3")
    os.environ.update(environment(url))
    djbench.migrate(url)
    # Not djbench.setup_django: its environment names Redis as the broker.
    if str(wl.ROOT) not in sys.path:
        sys.path.insert(0, str(wl.ROOT))
    import django

    django.setup()
    from django.conf import settings

    assert settings.CELERY_BROKER_URL.startswith("sqlite://"), settings.CELERY_BROKER_URL
    return url


def start_worker(
    procs: djbench.Processes, url: str, *, app: str, queues: str, concurrency: int, tag: str
) -> Path:
    log = folder() / f"{tag}-worker.log"
    args = [
        str(djbench.VENV_BIN / "celery"),
        "-A",
        app,
        "worker",
        *(os.environ.get("BENCH_WORKER_ARGS", "").split()),
        "--loglevel",
        "INFO",
        "--concurrency",
        str(concurrency),
        "-Q",
        queues,
        "-n",
        f"bench-embedded-{tag}@%h",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]
    procs.start(args, {**environment(url), WORKER_ENV: "1"}, log)
    return log


def wait_log(log: Path, predicate, *, timeout: float, proc: subprocess.Popen | None = None) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        if predicate(text):
            return True
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"worker exited with {proc.returncode}:\n{text[-3000:]}")
        time.sleep(0.05)
    return False


def trivial(url: str, tasks: int, timeout: float) -> dict:
    from opensquilla_site.celery import app

    with app.producer_or_acquire() as producer:
        for index in range(tasks):
            app.send_task(NOOP, args=(index,), queue=QUEUE, producer=producer, ignore_result=True)
    with djbench.running() as procs:
        log = start_worker(
            procs, url, app="bench.embedded_broker", queues=QUEUE, concurrency=1, tag="trivial"
        )
        if not wait_log(log, lambda t: " ready." in t, timeout=60, proc=procs.procs[-1]):
            raise RuntimeError("the worker did not get ready")
        start = time.perf_counter()

        def count(text: str) -> int:
            return sum(
                1 for line in text.splitlines() if f"Task {NOOP}[" in line and "succeeded" in line
            )

        def done(text: str) -> bool:
            return count(text) >= tasks

        finished = wait_log(log, done, timeout=timeout, proc=procs.procs[-1])
        wall = time.perf_counter() - start
        ran = count(log.read_text(errors="replace"))
    return {
        "tasks": tasks,
        "ran": ran,
        "finished": finished,
        "wall_s": round(wall, 2),
        "tasks_per_s": round(ran / wall, 1) if wall else None,
    }


def seed_failed_checkpoints(count: int) -> list[str]:
    """``count`` checkpoint_failed receipts, one per live session with a transcript."""
    import workers

    from receipts_app.models import MemoryDurableReceipt

    keys = workers.make_sessions("embedded", count)
    from sessions_app.models import Session

    ids = dict(
        Session.objects.filter(session_key__in=keys).values_list("session_key", "session_id")
    )
    rows = []
    for index, key in enumerate(keys):
        row = wl.receipt_row("embedded", index, status="checkpoint_failed")
        row.update(
            session_key=key,
            session_id=ids[key],
            scope="checkpoint",
            idempotency_key=f"checkpoint:{key}:{ids[key]}:embedded:{index}",
            next_retry_at_ms=None,
        )
        rows.append(row)
    djbench.bulk_seed(rows)
    return list(
        MemoryDurableReceipt.objects.filter(status="checkpoint_failed").values_list(
            "receipt_id", flat=True
        )
    )


def requeue(url: str, receipts: int, timeout: float) -> dict:
    from receipts_app.audit import Actor
    from receipts_app.models import MemoryDurableReceipt, OutboxMessage
    from receipts_app.requeue import create_requeue_plan, start_requeue_plan

    failed = seed_failed_checkpoints(receipts)
    actor = Actor(*ACTOR)
    plan = create_requeue_plan(
        filters={}, receipt_ids=failed, actor=actor, reason="embedded broker bench"
    )
    with djbench.running() as procs:
        log = start_worker(
            procs, url, app="opensquilla_site", queues="celery", concurrency=2, tag="requeue"
        )
        if not wait_log(log, lambda t: " ready." in t, timeout=60, proc=procs.procs[-1]):
            raise RuntimeError("the worker did not get ready")
        start = time.perf_counter()
        start_requeue_plan(plan_id=plan.plan_id, actor=actor)
        recovered = 0
        while time.perf_counter() - start < timeout:
            recovered = MemoryDurableReceipt.objects.filter(
                receipt_id__in=failed, status="checkpoint_recovered"
            ).count()
            if recovered == len(failed):
                break
            if procs.procs[-1].poll() is not None:
                raise RuntimeError(log.read_text(errors="replace")[-3000:])
            time.sleep(0.1)
        wall = time.perf_counter() - start
        left = OutboxMessage.objects.count()
    return {
        "receipts": len(failed),
        "recovered": recovered,
        "finished": recovered == len(failed),
        "wall_s": round(wall, 2),
        "receipts_per_s": round(recovered / wall, 1) if wall else None,
        "outbox_left": left,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000, help="trivial tasks (0: skip)")
    parser.add_argument("--receipts", type=int, default=1000, help="requeued receipts (0: skip)")
    parser.add_argument("--timeout", type=float, default=300.0, help="cap per part, seconds")
    parser.add_argument("--name", default="embedded_broker")
    args = parser.parse_args()

    url = prepare()
    result: dict = {
        "kind": "embedded_broker",
        "command": " ".join(["bench/embedded_broker.py", *sys.argv[1:]]),
        "machine": wl.machine_info(),
        "versions": djbench.versions(),
        "load_before": os.getloadavg()[0],
        "goals": {"trivial_tasks_per_s": GOAL_TASKS_PER_S, "requeue_1000_s": GOAL_REQUEUE_S},
    }
    if args.tasks:
        run = trivial(url, args.tasks, args.timeout)
        result["trivial"] = run
        djbench.emit(
            f"trivial: {run['ran']}/{run['tasks']} tasks in {run['wall_s']} s = "
            f"{run['tasks_per_s']} tasks/s through one worker process"
        )
    if args.receipts:
        run = requeue(url, args.receipts, args.timeout)
        result["requeue"] = run
        djbench.emit(
            f"requeue: {run['recovered']}/{run['receipts']} receipts recovered in "
            f"{run['wall_s']} s = {run['receipts_per_s']} receipts/s (one worker, 2 children); "
            f"{run['outbox_left']} messages left in the outbox"
        )
    result["load_after"] = os.getloadavg()[0]
    print(f"wrote {wl.write_result(args.name, result)}")


if __name__ == "__main__":
    main()
