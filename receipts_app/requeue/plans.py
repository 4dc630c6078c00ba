"""Requeue plans: freeze a filter, preview it, then execute it in batches with progress.

The plan id is the idempotency key of the execution: executing a plan that is already queued,
running or done changes nothing. The batch loop walks the frozen filter in ``(created_at,
id)`` order and stores a keyset cursor after each batch under the plan's row lock, so a task
delivered twice (or redelivered after a crash) resumes where the last batch ended and two
concurrent runners never process the same batch.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from django.db import OperationalError, transaction
from django.db.models import QuerySet

from opensquilla_site import timeutil
from opensquilla_site.exceptions import ValidationFailed
from opensquilla_site.pagination import keyset_after
from sessions_app.gateways import DEFAULT_GATEWAY, gateway_scope, no_worker_warnings

from .. import enqueue
from ..audit import Actor
from ..ledger import retry
from ..models import MemoryDurableReceipt, RequeuePlan
from ..selectors import ReceiptFilter, filter_receipts
from ..signals import requeue_outcomes_recorded
from .batch import requeue_batch
from .rules import ROW_FACT_FIELDS, BatchContext, Outcome, RowFacts, classify_requeue

logger = logging.getLogger(__name__)

ACTIVE_STATES = ("queued", "running", "done")
_PREVIEW_BATCH = 1000
# A plan gets one more runner per this many rows left, up to the caller's maximum.
_ROWS_PER_EXTRA_RUNNER = 2000


def _freeze_filters(filters: dict[str, Any]) -> dict[str, Any]:
    """Normalise through the shared selector, so the plan selects what the console showed.

    A plan stores ``ReceiptFilter.to_params()``: the same query parameters the API, the CLI
    and the console's URLs use, parsed back by ``ReceiptFilter.from_params``.

    The gateway is frozen with the filter: a plan made inside a gateway (``?gateway=``, see
    ``sessions_app.gateways``) names it, so executing it later, from a task that runs in no
    gateway, touches that gateway's rows only, whatever other gateways' rows match by then.
    """
    params = dict(filters or {})
    unknown = sorted(set(params) - set(ReceiptFilter.PARAMS))
    if unknown:
        raise ValidationFailed(f"unknown filter keys: {', '.join(unknown)}")
    frozen = ReceiptFilter.from_params(params)
    scope = gateway_scope()
    if scope is not None and frozen.gateway is None:
        frozen = replace(frozen, gateway=scope)
    elif scope is not None and frozen.gateway != scope:
        raise ValidationFailed(
            f"the filter names gateway {frozen.gateway!r} but the plan is made in gateway "
            f"{scope!r}: no receipt is in both",
            extra={"fields": {"gateway": f"must be {scope!r} (or left out) here"}},
        )
    return frozen.to_params()


def plan_queryset(plan: RequeuePlan) -> QuerySet[MemoryDurableReceipt]:
    qs = filter_receipts(ReceiptFilter.from_params(plan.filters))
    if plan.receipt_ids:
        qs = qs.filter(receipt_id__in=list(plan.receipt_ids))
    return qs.order_by("created_at", "id")


def create_requeue_plan(
    *,
    filters: dict[str, Any],
    receipt_ids: list[str] | None,
    actor: Actor,
    reason: str = "",
    sample_size: int = 5,
) -> RequeuePlan:
    """Freeze the selection and store its dry run: counts and sample rows per outcome.

    A plan needs a filter or explicit receipt ids: "requeue the whole ledger" is never
    what an operator meant by an empty form.
    """
    frozen = _freeze_filters(filters)
    ids = list(dict.fromkeys(str(r) for r in receipt_ids or []))
    # The gateway a plan was made in narrows a filter; on its own it selects nothing.
    named = set(frozen) - (set() if (filters or {}).get("gateway") else {"gateway"})
    if not named and not ids:
        raise ValidationFailed("a requeue plan needs a filter or receipt ids")
    plan = RequeuePlan(
        created_by=actor.name[:150],
        surface=actor.surface,
        reason=reason or "",
        filters=frozen,
        receipt_ids=ids,
    )
    counts: Counter[str] = Counter()
    samples: dict[str, list[dict[str, Any]]] = {}
    work_gateways: set[str] = set()
    now = timeutil.now_ms()
    # One ordered read of the whole selection (a single sort, even when the filter's index
    # cannot give the plan's order), classified a batch at a time with its lookups in one
    # query per batch. The transaction keeps PostgreSQL's cursor from being materialised.
    with transaction.atomic():
        rows_qs = plan_queryset(plan).values_list(*ROW_FACT_FIELDS)
        for batch in _stream_batches(rows_qs, _PREVIEW_BATCH):
            context = BatchContext(batch)
            for row in batch:
                outcome, message = classify_requeue(row, now_ms=now, context=context)
                counts[str(outcome)] += 1
                if outcome is Outcome.REQUEUED and row.gateway_id != DEFAULT_GATEWAY:
                    work_gateways.add(row.gateway_id)
                bucket = samples.setdefault(str(outcome), [])
                if len(bucket) < sample_size:
                    bucket.append(
                        {
                            "receipt_id": row.receipt_id,
                            "session_key": row.session_key,
                            "status": row.status,
                            "reason": row.reason,
                            "message": message,
                        }
                    )
    plan.total = sum(counts.values())
    plan.dry_run_counts = dict(counts)
    plan.dry_run_samples = samples
    plan.work_gateways = sorted(work_gateways)
    plan.save(force_insert=True)
    return plan


def plan_warnings(plan: RequeuePlan) -> list[str]:
    """One sentence per gateway whose rows the plan would queue work for and whose queue no
    live worker consumes now (read when asked: a worker may have started since the dry run)."""
    return no_worker_warnings(plan.work_gateways or [])


def _after(qs: QuerySet[Any, Any], created_at: int | None, pk: int | None) -> QuerySet[Any, Any]:
    if created_at is None or pk is None:
        return qs
    return keyset_after(
        qs, order_field="created_at", value=created_at, tie_value=pk, newest_first=False
    )


def _stream_batches(qs: QuerySet[Any, tuple[Any, ...]], size: int) -> Iterator[list[RowFacts]]:
    batch: list[RowFacts] = []
    for values in qs.iterator(chunk_size=size):
        batch.append(RowFacts._make(values))
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def get_requeue_plan(plan_id: str) -> RequeuePlan:
    plan = RequeuePlan.objects.filter(plan_id=plan_id).first()
    if plan is None:
        raise KeyError(f"Requeue plan not found: {plan_id}")
    return plan


def start_requeue_plan(*, plan_id: str, actor: Actor) -> RequeuePlan:
    """Queue the plan's execution once (a ``run_requeue_plan`` task runs it). A queued,
    running or done plan is returned as is.

    A failed plan may be executed again; it resumes from its cursor.
    """
    with transaction.atomic():
        plan = RequeuePlan.objects.select_for_update().filter(plan_id=plan_id).first()
        if plan is None:
            raise KeyError(f"Requeue plan not found: {plan_id}")
        if plan.state in ACTIVE_STATES:
            return plan
        plan.state = "queued"
        plan.error = ""
        plan.updated_at = timeutil.now_ms()
        plan.save(update_fields=["state", "error", "updated_at"])
        enqueue.send(enqueue.plan_runner_message(plan.plan_id))
        logger.info("requeue plan %s queued by %s@%s", plan_id, actor.name, actor.surface)
    return plan


def fan_out_requeue_plan(plan_id: str, *, runners: int) -> int:
    """Queue extra runners for a big queued or running plan; returns how many were queued.

    Runners of one plan take its batches in turn under the plan's row lock (each receipt
    is still acted on once, and the cursor still resumes), so a second runner overlaps its
    batch's database work with the first one's publishing and lets another worker share
    the plan. Extra runners never fan out again.
    """
    plan = (
        RequeuePlan.objects.filter(plan_id=plan_id, state__in=("queued", "running"))
        .values("total", "processed")
        .first()
    )
    if plan is None:
        return 0
    remaining = max(0, plan["total"] - plan["processed"])
    extra = max(0, min(runners - 1, remaining // _ROWS_PER_EXTRA_RUNNER))
    for _ in range(extra):
        enqueue.send(enqueue.plan_runner_message(plan_id, fan_out=False))
    return extra


def run_requeue_plan(
    plan_id: str, *, batch_size: int = 500, time_budget_s: float | None = None
) -> RequeuePlan:
    """Execute the plan's remaining batches (the body of the ``run_requeue_plan`` task).

    Returns with ``state == "running"`` when ``time_budget_s`` ran out between batches; the
    task then re-enqueues itself. A batch that PostgreSQL aborts on a deadlock or serialization
    failure is rolled back and run again (``ledger.retry``); one still conflicting after every
    retry is left to the next slice (``running``), so a plan never fails on a lock conflict
    when a task runs it. Any other error marks the plan ``failed`` with the error text and
    rolls that batch back; executing the plan again resumes from the cursor.
    """
    get_requeue_plan(plan_id)  # KeyError for an unknown id, before any state is touched
    started = time.monotonic()
    while True:
        try:
            plan, finished = retry.atomic_retrying(lambda: _run_one_batch(plan_id, batch_size))
        except OperationalError as exc:
            if time_budget_s is not None and retry.is_lock_conflict(exc):
                logger.warning("requeue plan %s: batch still conflicting; next slice", plan_id)
                return _keep_running(plan_id)
            logger.exception("requeue plan %s failed", plan_id)
            return _mark_failed(plan_id, exc)
        except Exception as exc:
            logger.exception("requeue plan %s failed", plan_id)
            return _mark_failed(plan_id, exc)
        if finished:
            return plan
        if time_budget_s is not None and time.monotonic() - started >= time_budget_s:
            return plan


def _run_one_batch(plan_id: str, batch_size: int) -> tuple[RequeuePlan, bool]:
    with transaction.atomic():
        plan = RequeuePlan.objects.select_for_update().get(plan_id=plan_id)
        if plan.state not in ("queued", "running"):
            return plan, True
        now = timeutil.now_ms()
        if plan.state == "queued":
            plan.state = "running"
            plan.started_at = plan.started_at or now
        rows = list(
            _after(plan_queryset(plan), plan.cursor_created_at, plan.cursor_id).values_list(
                "pk", "receipt_id", "created_at"
            )[:batch_size]
        )
        if not rows:
            plan.state = "done"
            plan.finished_at = now
            plan.updated_at = now
            plan.save()
            return plan, True
        actor = Actor(plan.created_by, plan.surface)
        counts = Counter(plan.result_counts or {})
        results = requeue_batch(
            [(pk, rid) for pk, rid, _created in rows],
            actor=actor,
            reason=plan.reason,
            plan_id=plan.plan_id,
        )
        outcomes = Counter(str(result.outcome) for result in results)
        counts.update(outcomes)
        # Counted by observers (/metrics), committed (or rolled back) with the batch.
        requeue_outcomes_recorded.send(
            sender=run_requeue_plan, outcomes=dict(outcomes), plan_rows=len(rows)
        )
        plan.result_counts = dict(counts)
        plan.processed += len(rows)
        plan.cursor_created_at, plan.cursor_id = rows[-1][2], rows[-1][0]
        plan.updated_at = timeutil.now_ms()
        plan.save()
        return plan, False


def _keep_running(plan_id: str) -> RequeuePlan:
    """Hand the plan to its next slice: ``running``, which the task re-enqueues."""
    with transaction.atomic():
        plan = RequeuePlan.objects.select_for_update().get(plan_id=plan_id)
        if plan.state == "queued":
            plan.state = "running"
            plan.started_at = plan.started_at or timeutil.now_ms()
            plan.updated_at = timeutil.now_ms()
            plan.save(update_fields=["state", "started_at", "updated_at"])
        return plan


def _mark_failed(plan_id: str, exc: BaseException) -> RequeuePlan:
    with transaction.atomic():
        plan = RequeuePlan.objects.select_for_update().get(plan_id=plan_id)
        plan.state = "failed"
        plan.error = f"{type(exc).__name__}: {exc}"[:4000]
        plan.updated_at = timeutil.now_ms()
        plan.save(update_fields=["state", "error", "updated_at"])
        return plan
