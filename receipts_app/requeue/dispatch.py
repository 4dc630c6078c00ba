"""Enqueue Celery work only after the surrounding transaction commits.

The task id is chosen up front so the caller can return it (and record it in the audit
event) before the broker ever sees the message. Callbacks are ``robust``: a broker that is
down at commit time loses the message but not the row, and ``sweep_lost_work`` (run by
``repair_tick``) finds the row later. Nothing stays pending forever.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any

from django.db import transaction

logger = logging.getLogger(__name__)

# Set while ``_send_all`` publishes a batch: one producer, one Redis pipeline for all of it.
_PRODUCER: ContextVar[Any] = ContextVar("requeue_dispatch_producer", default=None)

Message = tuple[str, tuple[Any, ...], dict[str, Any]]


def _send(task_name: str, task_id: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    # Imported late: tasks.py imports the requeue engine, which imports this module.
    from receipts_app import tasks

    task = getattr(tasks, task_name)
    producer = _PRODUCER.get()
    if producer is None:
        task.apply_async(args=args, kwargs=kwargs, task_id=task_id)
        return
    # Batch sends are fire-and-forget: nobody here waits on the result, so the producer
    # does not subscribe to each task's result channel (one Redis round trip and one
    # lingering subscription per message), and the reprs are plain ``repr``s.
    task.apply_async(
        args=args,
        kwargs=kwargs,
        task_id=task_id,
        producer=producer,
        ignore_result=True,
        argsrepr=repr(args)[:1024],
        kwargsrepr=repr(kwargs)[:1024],
    )


def _send_all(batch: Sequence[tuple[str, str, tuple[Any, ...], dict[str, Any]]]) -> None:
    """Publish many messages through one producer; kombu pipelines them on Redis.

    Each message fails alone (logged), like the one-callback-per-message path: the rows are
    committed either way and ``sweep_lost_work`` / the repair tick pick up what was lost.
    """
    from opensquilla_site.celery import app

    try:
        with app.producer_or_acquire() as producer, producer.batch():
            token = _PRODUCER.set(producer)
            try:
                for task_name, task_id, args, kwargs in batch:
                    try:
                        _send(task_name, task_id, args, kwargs)
                    except Exception:
                        logger.exception("could not enqueue %s as %s", task_name, task_id)
            finally:
                _PRODUCER.reset(token)
    except Exception:
        logger.exception("could not publish a batch of %d messages", len(batch))


def enqueue_many_on_commit(messages: Sequence[Message]) -> list[str]:
    """Queue many ``(task_name, args, kwargs)`` after commit in one go; returns the task ids."""
    batch = [(name, str(uuid.uuid4()), args, kwargs) for name, args, kwargs in messages]
    if batch:
        transaction.on_commit(lambda: _send_all(batch), robust=True)
    return [task_id for _name, task_id, _args, _kwargs in batch]


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


def checkpoint_message(
    session_key: str, *, turn_id: str | None = None, requeue_of: str | None = None, source: str
) -> Message:
    kwargs = {"turn_id": turn_id, "requeue_of": requeue_of, "source": source}
    return ("checkpoint_session", (session_key,), kwargs)


def repair_message(receipt_id: str) -> Message:
    return ("repair_receipt", (receipt_id,), {})


def enqueue_checkpoint(
    session_key: str, *, turn_id: str | None = None, requeue_of: str | None = None, source: str
) -> str:
    name, args, kwargs = checkpoint_message(
        session_key, turn_id=turn_id, requeue_of=requeue_of, source=source
    )
    return enqueue_on_commit(name, *args, **kwargs)


def enqueue_flush(session_key: str, *, turn_id: str | None = None) -> str:
    return enqueue_on_commit("flush_session", session_key, turn_id=turn_id)


def enqueue_plan(plan_id: str) -> str:
    return enqueue_on_commit("execute_requeue_plan", plan_id)
