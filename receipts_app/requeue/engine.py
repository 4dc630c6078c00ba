"""The requeue engine: one service behind every surface's requeue and acknowledge.

Every call takes the row lock (``select_for_update``), checks the caller's compare-and-set
expectation, and moves the row with a conditional UPDATE on the (status, updated_at) it read.
So two operators acting on what they both saw queue the work once: the second finds the row
changed and gets ``stale`` (or ``in_flight`` without an expectation). Work is enqueued only
after commit. Every call, including those that change nothing, appends one ReceiptEvent,
except a call refused for a receipt it may not see (``_records_not_found``).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from django.db import transaction

from opensquilla_site import timeutil
from opensquilla_site.exceptions import GenerationChanged
from sessions_app.gateways import no_worker_warning_for, using_gateway

from .. import audit, enqueue
from ..audit import Actor
from ..models import MemoryDurableReceipt, ReceiptEvent
from ..restore import loss_for_receipt
from ..signals import requeue_outcomes_recorded
from ..statuses import (
    ACKNOWLEDGEABLE_STATUSES,
    ACKNOWLEDGED,
    CHECKPOINT_FAILED,
    CHECKPOINT_RECOVERED,
    CHECKPOINT_REQUEUED,
)
from .rules import ON_DEMAND, Outcome, decide_requeue
from .transitions import requeue_transition

logger = logging.getLogger(__name__)

RECEIPT_ID_MAX_LENGTH = MemoryDurableReceipt._meta.get_field("receipt_id").max_length or 0

# The row moved between the locked read and the conditional UPDATE (never under the lock).
STALE_MESSAGE = "stale: changed meanwhile"


@dataclass
class RequeueResult:
    receipt_id: str
    outcome: Outcome
    message: str
    status: str | None
    superseded_by: str | None = None
    task_id: str | None = None
    # Set when the work was queued to a gateway's queue that no live worker consumes: it is
    # accepted (the outbox keeps it) and waits until one starts.
    warning: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["outcome"] = str(self.outcome)
        return data


class AckOutcome(StrEnum):
    ACKNOWLEDGED = "acknowledged"
    NOT_ACKNOWLEDGEABLE = "not_acknowledgeable"
    STALE = "stale"
    NOT_FOUND = "not_found"


@dataclass
class AcknowledgeResult:
    receipt_id: str
    outcome: AckOutcome
    message: str
    status: str | None
    from_status: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["outcome"] = str(self.outcome)
        return data


def _next_stamp(previous: int) -> int:
    # A compare-and-set on updated_at must see every write, even two within one millisecond.
    return max(timeutil.now_ms(), previous + 1)


def _stale_message(
    row: MemoryDurableReceipt, expected_status: str | None, expected_updated_at: int | None
) -> str | None:
    if expected_status is not None and row.status != expected_status:
        return f"stale: status is now {row.status}, not {expected_status}"
    if expected_updated_at is not None and row.updated_at != expected_updated_at:
        return "stale: the receipt changed since it was read"
    return None


def _locked_row(receipt_id: str) -> MemoryDurableReceipt | None:
    return MemoryDurableReceipt.objects.select_for_update().filter(receipt_id=receipt_id).first()


def _records_not_found(receipt_id: str) -> bool:
    """Whether a call that found no receipt leaves a ``not_found`` event under the id.

    Only when no gateway holds the id: the timeline of a receipt purged meanwhile keeps the
    attempt. A receipt of a gateway outside the caller's scope (``?gateway=`` naming another)
    was refused, not missing: nothing is written into its timeline. An id longer than the column
    names no receipt, and could not be stored either.
    """
    if len(receipt_id) > RECEIPT_ID_MAX_LENGTH:
        return False
    with using_gateway(None):
        return not MemoryDurableReceipt.objects.filter(receipt_id=receipt_id).exists()


def _cas_update(row: MemoryDurableReceipt, **fields: Any) -> bool:
    """Write ``fields`` only if the row still has the status and stamp read under the lock."""
    changed = MemoryDurableReceipt.objects.filter(
        pk=row.pk, status=row.status, updated_at=row.updated_at
    ).update(**fields)
    return changed == 1


def requeue_receipt(
    *,
    receipt_id: str,
    actor: Actor,
    reason: str = "",
    expected_status: str | None = None,
    expected_updated_at: int | None = None,
    plan_id: str | None = None,
) -> RequeueResult:
    """Requeue one receipt by docs/STATUSES.md#requeue-outcomes and record the outcome, whatever it is.

    Terminal repairs (and repair rows waiting on a backoff) go back to ``repair_pending``,
    due now, with ``attempt_count = 0``: a fresh budget of four attempts, exactly what a
    legacy-imported row gets upstream. ``checkpoint_failed`` becomes ``checkpoint_requeued``
    and a checkpoint task runs for the live generation.
    """
    with audit.acting_as(actor), transaction.atomic():
        row = _locked_row(receipt_id)
        if row is None:
            result = RequeueResult(receipt_id, Outcome.NOT_FOUND, "receipt not found", None)
            if _records_not_found(receipt_id):
                _record_requeue(result, None, "", actor, reason, plan_id, None)
            _record_requeue_outcome(result)
            return result
        from_status = row.status
        stale = _stale_message(row, expected_status, expected_updated_at)
        if stale is not None:
            result = RequeueResult(receipt_id, Outcome.STALE, stale, row.status)
        else:
            result = _apply_requeue(row)
        _record_requeue(
            result, from_status, row.session_key, actor, reason, plan_id, row.gateway_id
        )
        _record_requeue_outcome(result)
        return result


def _record_requeue_outcome(result: RequeueResult) -> None:
    # Counted by observers (/metrics) inside the requeue's own transaction.
    requeue_outcomes_recorded.send(
        sender=requeue_receipt, outcomes={str(result.outcome): 1}, plan_rows=0
    )


def _apply_requeue(row: MemoryDurableReceipt) -> RequeueResult:
    now = timeutil.now_ms()
    outcome, message, saved_id = decide_requeue(row, now_ms=now, context=ON_DEMAND)
    rid = row.receipt_id
    move = requeue_transition(row, outcome, now_ms=now, superseded_by=saved_id)
    if move is None:
        return RequeueResult(rid, outcome, message, row.status)
    if not _cas_update(row, **move.update(_next_stamp(row.updated_at))):
        return RequeueResult(rid, Outcome.STALE, STALE_MESSAGE, row.status)
    task_id = enqueue.send(move.follow_up) if move.follow_up is not None else None
    superseded_by = saved_id if outcome is Outcome.SUPERSEDED else None
    result = RequeueResult(rid, outcome, message, move.status, superseded_by, task_id)
    if task_id is not None:
        result.warning = no_worker_warning_for(str(row.gateway_id))
    return result


def _record_requeue(
    result: RequeueResult,
    from_status: str | None,
    session_key: str,
    actor: Actor,
    reason: str,
    plan_id: str | None,
    gateway: str | None,
) -> None:
    requeue_event(result, from_status, session_key, actor, reason, plan_id, gateway).save(
        force_insert=True
    )


def requeue_event(
    result: RequeueResult,
    from_status: str | None,
    session_key: str,
    actor: Actor,
    reason: str,
    plan_id: str | None,
    gateway: str | None = None,
) -> ReceiptEvent:
    """The audit event of one requeue call (unsaved), whatever its outcome, in the gateway of
    the receipt (None: not found, the current gateway)."""
    details: dict[str, Any] = {"message": result.message}
    if result.task_id:
        details["task_id"] = result.task_id
    if result.superseded_by:
        details["superseded_by"] = result.superseded_by
    if result.warning:
        details["warning"] = result.warning
    return audit.build_event(
        receipt_id=result.receipt_id,
        session_key=session_key,
        action="requeue",
        from_status=from_status,
        to_status=result.status,
        outcome=str(result.outcome),
        reason=reason or None,
        plan_id=plan_id,
        details=details,
        actor=actor,
        gateway=gateway,
    )


def complete_checkpoint_requeue(
    *,
    requeued_receipt_id: str,
    saved: MemoryDurableReceipt | None,
    error: BaseException | None,
) -> None:
    """Close a requeued checkpoint: recovered (linked to ``saved``) or failed again.

    Safe to call twice: only a row still in ``checkpoint_requeued`` moves on success. On
    failure a row the checkpoint's own failure upsert already put back to
    ``checkpoint_failed`` (same idempotency key) just gets the new reason.
    """
    actor = audit.WORKER
    with audit.acting_as(actor), transaction.atomic():
        row = _locked_row(requeued_receipt_id)
        if row is None:
            logger.warning(
                "requeued checkpoint %s vanished (session deleted?)", requeued_receipt_id
            )
            return
        if saved is not None and error is None and saved.session_id != row.session_id:
            # The checkpoint was taken of a later generation (a reset landed mid-task): it
            # does not hold what the requeued row failed to save.
            error = GenerationChanged(row.session_key)
        from_status = row.status
        if error is None and saved is not None:
            if row.status != CHECKPOINT_REQUEUED:
                return
            _cas_update(
                row,
                status=CHECKPOINT_RECOVERED,
                resolved_by_receipt_id=saved.receipt_id,
                updated_at=_next_stamp(row.updated_at),
            )
            to_status, outcome, why = CHECKPOINT_RECOVERED, "recovered", None
            details = {"saved_receipt_id": saved.receipt_id}
        else:
            if row.status not in (CHECKPOINT_REQUEUED, CHECKPOINT_FAILED):
                return
            why = str(error) if error is not None else "checkpoint task returned no receipt"
            _cas_update(
                row,
                status=CHECKPOINT_FAILED,
                reason=why,
                resolved_by_receipt_id=None,
                updated_at=_next_stamp(row.updated_at),
            )
            to_status, outcome, details = CHECKPOINT_FAILED, "failed", {}
        audit.record_requeue_complete(
            receipt_id=row.receipt_id,
            session_key=row.session_key,
            from_status=from_status,
            to_status=to_status,
            outcome=outcome,
            reason=why,
            details=details,
            gateway=row.gateway_id,
        )


def acknowledge_receipt(
    *,
    receipt_id: str,
    actor: Actor,
    reason: str,
    expected_status: str | None = None,
    expected_updated_at: int | None = None,
) -> AcknowledgeResult:
    """Accept a terminal failure as final. The row is kept; its old status is in the event."""
    if not reason or not reason.strip():
        raise ValueError("acknowledge needs a written reason")
    reason = reason.strip()
    # Read before the row is locked: it may read files and transcripts.
    loss = _loss_note(receipt_id)
    with audit.acting_as(actor), transaction.atomic():
        row = _locked_row(receipt_id)
        if row is None:
            result = AcknowledgeResult(receipt_id, AckOutcome.NOT_FOUND, "receipt not found", None)
            if not _records_not_found(receipt_id):
                return result
            session_key, gateway = "", None
        else:
            session_key, gateway = row.session_key, row.gateway_id
            result = _apply_acknowledge(row, expected_status, expected_updated_at)
        audit.record_event(
            receipt_id=receipt_id,
            session_key=session_key,
            action="acknowledge",
            from_status=result.from_status,
            to_status=result.status,
            outcome=str(result.outcome),
            reason=reason,
            details={"message": result.message, **({"loss": loss} if loss else {})},
            actor=actor,
            gateway=gateway,
        )
        return result


def _loss_note(receipt_id: str) -> dict[str, Any] | None:
    """What an acknowledged checkpoint loses, for its audit event: the counts of the loss
    report (``restore.loss``) when the row is a checkpoint whose file no longer reads back."""
    row = (
        MemoryDurableReceipt.objects.filter(receipt_id=receipt_id, scope="checkpoint")
        .exclude(source_path__isnull=True)
        .exclude(source_path="")
        .first()
    )
    if row is None or row.status not in ACKNOWLEDGEABLE_STATUSES:
        return None
    report = loss_for_receipt(row)
    if not report.file_lost:
        return None
    return {
        "file_state": report.file_state,
        "covered": report.covered,
        "lost": report.lost_count,
        "summary": report.summary,
    }


def _apply_acknowledge(
    row: MemoryDurableReceipt, expected_status: str | None, expected_updated_at: int | None
) -> AcknowledgeResult:
    rid, status = row.receipt_id, row.status
    stale = _stale_message(row, expected_status, expected_updated_at)
    if stale is not None:
        return AcknowledgeResult(rid, AckOutcome.STALE, stale, status, status)
    if status not in ACKNOWLEDGEABLE_STATUSES:
        message = f"only terminal failures can be acknowledged; this one is {status}"
        return AcknowledgeResult(rid, AckOutcome.NOT_ACKNOWLEDGEABLE, message, status, status)
    if not _cas_update(row, status=ACKNOWLEDGED, updated_at=_next_stamp(row.updated_at)):
        return AcknowledgeResult(rid, AckOutcome.STALE, STALE_MESSAGE, status, status)
    return AcknowledgeResult(
        rid, AckOutcome.ACKNOWLEDGED, f"acknowledged ({status})", ACKNOWLEDGED, status
    )
