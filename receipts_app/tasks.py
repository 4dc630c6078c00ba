"""Celery tasks. Each takes ids, calls one service, and owns only retry and time limits.

The top of the worker's call path: tasks import the services and the requeue engine, never
the other way round. Services send work through ``receipts_app.enqueue``, which knows each
task by the name it is registered under here (``enqueue.task_name``).

All tasks are ``acks_late`` (a worker that dies mid-task leaves the message to be redelivered;
how soon follows from the limits in ``task_limits``), the work sent through ``enqueue`` stays
in its outbox until the task ends (``_outbox_task_ended``), and every task is safe to run twice: checkpoints and flushes upsert by idempotency key, repairs claim rows
atomically, requeues compare-and-set, and plans resume from their cursor. Failures that the
services already recorded as receipts are returned, not raised, so nothing crash-loops; only
transient database errors are retried with backoff.

A task for a gateway's rows arrives on that gateway's queue (``enqueue`` routes it) and runs
only on a worker that serves that gateway (``OPENSQUILLA_GATEWAY``): one that reaches another
worker is refused before anything is read from or written to a workspace (logged; a requeued
checkpoint goes back to ``checkpoint_failed`` saying so, a repair row stays due for its own
gateway's tick).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from celery import shared_task
from celery.signals import task_postrun
from django.db import InterfaceError, OperationalError

from opensquilla_site import timeutil
from receipts_app import task_limits
from sessions_app.gateways import DEFAULT_GATEWAY, MisroutedWork, check_served, using_gateway

from . import audit, enqueue, flush_runtime, repair, requeue, scrub, services
from .checkpoint import DEFAULT_SOURCE
from .enqueue import (
    CHECKPOINT_SESSION,
    FLUSH_SESSION,
    REPAIR_RECEIPT,
    REPAIR_TICK,
    RUN_REQUEUE_PLAN,
    SCRUB_CHECKPOINTS,
    task_name,
)

logger = logging.getLogger(__name__)
_TASK_PREFIX = task_name("")

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
# Runners per big plan (each a task any worker can take); see requeue.fan_out_requeue_plan.
PLAN_RUNNERS = 2


def _refused(exc: MisroutedWork, **facts: Any) -> dict[str, Any]:
    logger.error("%s", exc)
    return {**facts, "status": "refused", "error": str(exc)}


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
    name=task_name(CHECKPOINT_SESSION),
    soft_time_limit=task_limits.CHECKPOINT.soft,
    time_limit=task_limits.CHECKPOINT.hard,
    **_RETRY,
)
def checkpoint_session(
    session_key: str,
    turn_id: str | None = None,
    requeue_of: str | None = None,
    source: str = DEFAULT_SOURCE,
    gateway: str | None = None,
) -> dict[str, Any]:
    if requeue_of:
        # The retake checks the row's own gateway (and fails the row if it is not ours).
        return requeue.retake_checkpoint(requeue_of, turn_id=turn_id, source=source)
    try:
        check_served(gateway, what=f"the checkpoint of {session_key}")
    except MisroutedWork as exc:
        return _refused(exc, session_key=session_key)
    with using_gateway(gateway):
        return services.take_checkpoint(session_key=session_key, turn_id=turn_id, source=source)


@shared_task(
    name=task_name(FLUSH_SESSION),
    soft_time_limit=task_limits.FLUSH.soft,
    time_limit=task_limits.FLUSH.hard,
    **_RETRY,
)
def flush_session(session_key: str, turn_id: str | None = None, gateway: str | None = None) -> Any:
    try:
        check_served(gateway, what=f"the flush of {session_key}")
    except MisroutedWork as exc:
        return _refused(exc, session_key=session_key)
    try:
        # Ledger rows written by the flush are attributed to the worker, like checkpoints.
        with audit.acting_as(audit.WORKER), using_gateway(gateway):
            return _jsonable(flush_runtime.flush_session(session_key, turn_id=turn_id))
    except (KeyError, ValueError) as exc:
        # Session gone or nothing to flush: retrying cannot help, so report and stop.
        logger.warning("flush of %s skipped: %s", session_key, exc)
        return {"status": "skipped", "session_key": session_key, "error": str(exc)}


@shared_task(
    name=task_name(REPAIR_TICK),
    soft_time_limit=task_limits.REPAIR_TICK.soft,
    time_limit=task_limits.REPAIR_TICK.hard,
    **_RETRY,
)
def repair_tick(gateway: str | None = None) -> dict[str, Any]:
    """Without ``gateway`` (beat's): the central tick, on the default queue. With it: that
    gateway's repair pass, queued by the central tick to the gateway's own worker."""
    if gateway is not None:
        try:
            check_served(gateway, what="a repair tick")
        except MisroutedWork as exc:
            return _refused(exc, gateway=gateway)
        return {"repair": _jsonable(repair.run_gateway_repair_tick(gateway))}
    repaired = _jsonable(repair.run_repair_tick())
    swept = requeue.sweep_lost_work(timeutil.now_ms())
    ticks = repair.queue_gateway_ticks()
    return {"repair": repaired, "swept": swept, "gateway_ticks": ticks}


@shared_task(
    name=task_name(SCRUB_CHECKPOINTS),
    soft_time_limit=task_limits.SCRUB.soft,
    time_limit=task_limits.SCRUB.hard,
    **_RETRY,
)
def scrub_checkpoints(
    agent: str = "", force: bool = False, full: bool | None = None, gateway: str | None = None
) -> dict[str, Any]:
    """Verify a gateway's checkpoint files (receipts_app.scrub) on the worker that holds them."""
    name = gateway or DEFAULT_GATEWAY
    try:
        report = scrub.scrub_checkpoints(name, agent or None, force=force, full=full)
    except MisroutedWork as exc:
        return _refused(exc, gateway=name)
    return report.to_dict()


@shared_task(soft_time_limit=50, time_limit=60, expires=30, ignore_result=True, **_RETRY)
def scrub_tick() -> dict[str, Any]:
    """Beat's: queue every gateway's scrub to its own worker (a run starts a cycle when due)."""
    return {"queued": scrub.queue_scrubs()}


@shared_task(soft_time_limit=50, time_limit=60, expires=30, ignore_result=True, **_RETRY)
def fold_ledger_aggregates() -> dict[str, int]:
    """Fold the counts' delta rows and group the failures that arrived since the last run."""
    from receipts_app.counts import fold_counts
    from receipts_app.failure_groups import fold_all

    return {"count_rows_folded": fold_counts(), "failures_grouped": fold_all()}


@shared_task(
    name=task_name(REPAIR_RECEIPT),
    soft_time_limit=task_limits.REPAIR_RECEIPT.soft,
    time_limit=task_limits.REPAIR_RECEIPT.hard,
    **_RETRY,
)
def repair_receipt(receipt_id: str, gateway: str | None = None) -> Any:
    # ``gateway`` routed the message; the repair checks the row's own gateway.
    return _jsonable(repair.repair_one(receipt_id))


@shared_task(
    name=task_name(RUN_REQUEUE_PLAN),
    soft_time_limit=task_limits.PLAN.soft,
    time_limit=task_limits.PLAN.hard,
    **_RETRY,
)
def run_requeue_plan(plan_id: str, fan_out: bool = True) -> dict[str, Any]:
    """One slice of a plan's execution; the first runner may queue more (fan-out)."""
    if fan_out:
        requeue.fan_out_requeue_plan(plan_id, runners=PLAN_RUNNERS)
    try:
        plan = requeue.run_requeue_plan(
            plan_id, batch_size=PLAN_BATCH_SIZE, time_budget_s=PLAN_SLICE_SECONDS
        )
    except KeyError as exc:
        logger.warning("requeue plan %s not found", plan_id)
        return {"plan_id": plan_id, "state": "not_found", "error": str(exc)}
    if plan.state == "running":
        # The next slice of this same runner; it must not fan out again. Through the outbox
        # like every message: while it waits in the queue the plan sweep sends no other.
        enqueue.send(enqueue.plan_runner_message(plan_id, fan_out=False))
    return {
        "plan_id": plan.plan_id,
        "state": plan.state,
        "processed": plan.processed,
        "result_counts": plan.result_counts,
    }


@task_postrun.connect
def _outbox_task_ended(
    sender: Any = None, task_id: str | None = None, state: str | None = None, **_kwargs: Any
) -> None:
    """The task's work is done (or failed for good): take its message out of the outbox."""
    name = str(getattr(sender, "name", ""))
    if not task_id or not name.startswith(_TASK_PREFIX):
        return
    try:
        enqueue.task_ended(task_id, name[len(_TASK_PREFIX) :], retrying=state == "RETRY")
    except Exception:  # noqa: BLE001 - the row stays; at worst the sweep sends it once more
        logger.exception("could not clear outbox message %s", task_id)
