"""Send work to the Celery workers, after the surrounding transaction commits.

The one door to the broker for the services and the requeue engine. It knows the workers'
tasks by their registered names (``TASKS``; ``tasks.py`` registers each under exactly that
name) and never imports ``tasks.py``: the tasks call down into the services, and the
services send work through here, so nothing calls back up.

The task id is chosen up front so the caller can return it (and record it in the audit event)
before the broker ever sees the message. Callbacks are ``robust``: a broker that is down at
commit time loses the message but not the row, and ``requeue.sweep_lost_work`` (run by
``repair_tick``) finds the row later. Nothing stays pending forever.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any

from django.db import transaction

from opensquilla_site.celery import app
from sessions_app.gateways import DEFAULT_GATEWAY, current_gateway

logger = logging.getLogger(__name__)

# The workers' tasks, by the short name every message uses; ``task_name`` gives the
# registered name.
CHECKPOINT_SESSION = "checkpoint_session"
FLUSH_SESSION = "flush_session"
REPAIR_RECEIPT = "repair_receipt"
REPAIR_TICK = "repair_tick"
RUN_REQUEUE_PLAN = "run_requeue_plan"
TASKS = (CHECKPOINT_SESSION, FLUSH_SESSION, REPAIR_RECEIPT, REPAIR_TICK, RUN_REQUEUE_PLAN)
_TASK_MODULE = "receipts_app.tasks"

# ``(short task name, args, kwargs)``: one message, not yet sent.
Message = tuple[str, tuple[Any, ...], dict[str, Any]]

# Set while ``_send_all`` publishes a batch: one producer, one Redis pipeline for all of it.
_PRODUCER: ContextVar[Any] = ContextVar("enqueue_producer", default=None)


def task_name(short_name: str) -> str:
    """The name the task is registered under (and that the worker logs)."""
    return f"{_TASK_MODULE}.{short_name}"


def _send(short_name: str, task_id: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    # Celery's registry (filled by autodiscovery) finds the task; eager mode still applies.
    task = app.tasks[task_name(short_name)]
    producer = _PRODUCER.get()
    if producer is None:
        task.apply_async(args=args, kwargs=kwargs, task_id=task_id)
        return
    # Batch sends are fire-and-forget: nobody here waits on the result, so the producer
    # does not subscribe to each task's result channel (one Redis round trip and one
    # lingering subscription per message), and the reprs are plain ``repr``s.
    # (``argsrepr``/``kwargsrepr`` are message options celery-types does not list.)
    options: dict[str, Any] = {
        "argsrepr": repr(args)[:1024],
        "kwargsrepr": repr(kwargs)[:1024],
    }
    task.apply_async(
        args=args, kwargs=kwargs, task_id=task_id, producer=producer, ignore_result=True, **options
    )


def _send_all(batch: Sequence[tuple[str, str, tuple[Any, ...], dict[str, Any]]]) -> None:
    """Publish many messages through one producer; kombu pipelines them on Redis.

    Each message fails alone (logged), like the one-callback-per-message path: the rows are
    committed either way and ``sweep_lost_work`` / the repair tick pick up what was lost.
    """
    try:
        with app.producer_or_acquire() as producer, producer.batch():
            token = _PRODUCER.set(producer)
            try:
                for short_name, task_id, args, kwargs in batch:
                    try:
                        _send(short_name, task_id, args, kwargs)
                    except Exception:
                        logger.exception("could not enqueue %s as %s", short_name, task_id)
            finally:
                _PRODUCER.reset(token)
    except Exception:
        logger.exception("could not publish a batch of %d messages", len(batch))


def send(message: Message) -> str:
    """Send one message once the current transaction commits; returns its task id."""
    short_name, args, kwargs = message
    task_id = str(uuid.uuid4())

    def after_commit() -> None:
        _send(short_name, task_id, args, kwargs)

    transaction.on_commit(after_commit, robust=True)
    logger.debug("queued %s(%s) as %s after commit", short_name, args, task_id)
    return task_id


def send_many(messages: Sequence[Message]) -> list[str]:
    """Send many messages after commit through one producer; returns their task ids."""
    batch = [(name, str(uuid.uuid4()), args, kwargs) for name, args, kwargs in messages]
    if batch:
        transaction.on_commit(lambda: _send_all(batch), robust=True)
    return [task_id for _name, task_id, _args, _kwargs in batch]


# --- the messages ----------------------------------------------------------------------------


def _gateway_kwargs(gateway: str | None) -> dict[str, str]:
    """The session's gateway (default: the current one), named only when it is not ``local``,
    so a single-gateway deployment's messages read exactly as before."""
    name = gateway or current_gateway()
    return {} if name == DEFAULT_GATEWAY else {"gateway": name}


def checkpoint_message(
    session_key: str,
    *,
    turn_id: str | None = None,
    requeue_of: str | None = None,
    source: str,
    gateway: str | None = None,
) -> Message:
    """Take a checkpoint of the live transcript; with ``requeue_of``, retake that failed one."""
    kwargs = {"turn_id": turn_id, "requeue_of": requeue_of, "source": source}
    return (CHECKPOINT_SESSION, (session_key,), {**kwargs, **_gateway_kwargs(gateway)})


def flush_message(
    session_key: str, *, turn_id: str | None = None, gateway: str | None = None
) -> Message:
    return (FLUSH_SESSION, (session_key,), {"turn_id": turn_id, **_gateway_kwargs(gateway)})


def repair_message(receipt_id: str) -> Message:
    return (REPAIR_RECEIPT, (receipt_id,), {})


def plan_runner_message(plan_id: str, *, fan_out: bool = True) -> Message:
    """Run a requeue plan's batches; only the first runner of a plan may add more runners."""
    kwargs = {} if fan_out else {"fan_out": False}
    return (RUN_REQUEUE_PLAN, (plan_id,), kwargs)
