"""Celery tasks. Each takes ids, calls one service, and owns only retry and time limits.

All tasks are ``acks_late`` (a worker that dies mid-task leaves the message to be redelivered;
how soon follows from the limits in ``task_limits``)
and safe to run twice: checkpoints and flushes upsert by idempotency key, repairs claim rows
atomically, requeues compare-and-set, and plans resume from their cursor. Failures that the
services already recorded as receipts are returned, not raised, so nothing crash-loops; only
transient database errors are retried with backoff.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from celery import shared_task
from django.db import InterfaceError, OperationalError

from opensquilla_site import timeutil
from receipts_app import task_limits

logger = logging.getLogger(__name__)

_RETRY: dict[str, Any] = {
    "acks_late": True,
    "autoretry_for": (OperationalError, InterfaceError),
    "retry_backoff": 5,
    "retry_backoff_max": 300,
    "retry_jitter": True,
    "max_retries": 5,
}


# Plans run in slices so one task never nears its hard limit; the rest is a new message.
PLAN_SLICE_SECONDS = 240.0
# Rows per plan batch (one transaction): fewer, larger batches re-run the filter less often.
PLAN_BATCH_SIZE = 1000
# Runners per big plan (each a task any worker can take); see fan_out_requeue_plan.
PLAN_RUNNERS = 2


def _jsonable(value: Any) -> Any:
    """Task results go through a JSON result backend: reduce service objects to plain data."""
    if value is None or isinstance(value, str | int | float | bool | list | dict):
        return value
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if hasattr(value, "receipt_id") and hasattr(value, "status"):
        return {"receipt_id": value.receipt_id, "status": value.status}
    return str(value)


@shared_task(
    soft_time_limit=task_limits.CHECKPOINT.soft,
    time_limit=task_limits.CHECKPOINT.hard,
    **_RETRY,
)
def checkpoint_session(
    session_key: str,
    turn_id: str | None = None,
    requeue_of: str | None = None,
    source: str = "session_manager",
) -> dict[str, Any]:
    from receipts_app.services import perform_checkpoint

    return perform_checkpoint(
        session_key=session_key, turn_id=turn_id, requeue_of=requeue_of, source=source
    )


@shared_task(
    soft_time_limit=task_limits.FLUSH.soft,
    time_limit=task_limits.FLUSH.hard,
    **_RETRY,
)
def flush_session(session_key: str, turn_id: str | None = None) -> Any:
    from receipts_app import audit, flush_runtime

    try:
        # Ledger rows written by the flush are attributed to the worker, like checkpoints.
        with audit.acting_as(audit.WORKER):
            return _jsonable(flush_runtime.flush_session(session_key, turn_id=turn_id))
    except (KeyError, ValueError) as exc:
        # Session gone or nothing to flush: retrying cannot help, so report and stop.
        logger.warning("flush of %s skipped: %s", session_key, exc)
        return {"status": "skipped", "session_key": session_key, "error": str(exc)}


@shared_task(
    soft_time_limit=task_limits.REPAIR_TICK.soft,
    time_limit=task_limits.REPAIR_TICK.hard,
    **_RETRY,
)
def repair_tick() -> dict[str, Any]:
    from receipts_app import repair
    from receipts_app.requeue import sweep_lost_work

    repaired = _jsonable(repair.run_repair_tick())
    swept = sweep_lost_work(timeutil.now_ms())
    return {"repair": repaired, "swept": swept}


@shared_task(
    soft_time_limit=task_limits.REPAIR_RECEIPT.soft,
    time_limit=task_limits.REPAIR_RECEIPT.hard,
    **_RETRY,
)
def repair_receipt(receipt_id: str) -> Any:
    from receipts_app import repair

    return _jsonable(repair.repair_one(receipt_id))


@shared_task(
    soft_time_limit=task_limits.REQUEUE.soft,
    time_limit=task_limits.REQUEUE.hard,
    **_RETRY,
)
def requeue_receipts(
    receipt_ids: list[str], actor_name: str, surface: str, reason: str = ""
) -> list[dict[str, Any]]:
    from receipts_app.audit import Actor
    from receipts_app.requeue import requeue_receipt

    actor = Actor(actor_name, surface)
    return [
        requeue_receipt(receipt_id=rid, actor=actor, reason=reason).to_dict() for rid in receipt_ids
    ]


@shared_task(
    soft_time_limit=task_limits.PLAN.soft,
    time_limit=task_limits.PLAN.hard,
    **_RETRY,
)
def execute_requeue_plan(plan_id: str, fan_out: bool = True) -> dict[str, Any]:
    from receipts_app.requeue import fan_out_requeue_plan, run_requeue_plan

    if fan_out:
        fan_out_requeue_plan(plan_id, runners=PLAN_RUNNERS)
    try:
        plan = run_requeue_plan(
            plan_id, batch_size=PLAN_BATCH_SIZE, time_budget_s=PLAN_SLICE_SECONDS
        )
    except KeyError as exc:
        logger.warning("requeue plan %s not found", plan_id)
        return {"plan_id": plan_id, "state": "not_found", "error": str(exc)}
    if plan.state == "running":
        # The next slice of this same runner; it must not fan out again.
        execute_requeue_plan.delay(plan_id, fan_out=False)
    return {
        "plan_id": plan.plan_id,
        "state": plan.state,
        "processed": plan.processed,
        "result_counts": plan.result_counts,
    }
