"""Enqueue Celery work only after the surrounding transaction commits.

The task id is chosen up front so the caller can return it (and record it in the audit
event) before the broker ever sees the message. Callbacks are ``robust``: a broker that is
down at commit time loses the message but not the row, and ``sweep_lost_work`` (run by
``repair_tick``) finds the row later. Nothing stays pending forever.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.db import transaction

logger = logging.getLogger(__name__)


def _send(task_name: str, task_id: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    # Imported late: tasks.py imports the requeue engine, which imports this module.
    from receipts_app import tasks

    task = getattr(tasks, task_name)
    task.apply_async(args=args, kwargs=kwargs, task_id=task_id)


def enqueue_on_commit(task_name: str, *args: Any, **kwargs: Any) -> str:
    """Queue ``receipts_app.tasks.<task_name>`` once the current transaction commits."""
    task_id = str(uuid.uuid4())

    def send() -> None:
        _send(task_name, task_id, args, kwargs)

    transaction.on_commit(send, robust=True)
    logger.debug("queued %s(%s) as %s after commit", task_name, args, task_id)
    return task_id


def enqueue_repair(receipt_id: str) -> str:
    return enqueue_on_commit("repair_receipt", receipt_id)


def enqueue_checkpoint(
    session_key: str, *, turn_id: str | None = None, requeue_of: str | None = None, source: str
) -> str:
    return enqueue_on_commit(
        "checkpoint_session", session_key, turn_id=turn_id, requeue_of=requeue_of, source=source
    )


def enqueue_flush(session_key: str, *, turn_id: str | None = None) -> str:
    return enqueue_on_commit("flush_session", session_key, turn_id=turn_id)


def enqueue_plan(plan_id: str) -> str:
    return enqueue_on_commit("execute_requeue_plan", plan_id)
