"""The project's Celery app for worker tests: every task routed to this run's private queue.

Started as ``celery -A tests.worker.celery_app worker -Q <queue>``. It is the same app object
as ``opensquilla_site.celery`` with one change, so tasks the worker itself sends (a plan's
next slice, a swept checkpoint) stay on the test's queue instead of reaching a developer's
real worker through the shared broker.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from opensquilla_site.celery import app

TEST_QUEUE_ENV = "OPENSQUILLA_TEST_QUEUE"


def route_to(queue: str) -> None:
    app.conf.update(
        task_default_queue=queue,
        task_routes={"receipts_app.tasks.*": {"queue": queue}},
    )


@app.task(name="tests.worker.busy")
def busy(seconds: float, marker: str) -> None:
    """Hold this worker for ``seconds`` (``--pool=solo``: the whole worker), saying in
    ``marker`` when it started and when it is done."""
    Path(marker).write_text("started", encoding="utf-8")
    time.sleep(seconds)
    Path(marker).write_text("done", encoding="utf-8")


if os.environ.get(TEST_QUEUE_ENV):
    route_to(os.environ[TEST_QUEUE_ENV])

__all__ = ["app", "busy", "route_to"]
