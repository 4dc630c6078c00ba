"""What a requeue or an acknowledge WOULD do to one receipt (PRODUCT.md 3). No writes.

The same rules serve the dry run of a plan, the console's action buttons and the requeue
itself, so an operator is never shown an outcome the engine would not produce.
"""

from __future__ import annotations

from enum import StrEnum

from opensquilla_site import timeutil
from sessions_app.models import Session

from ..ledger import REPAIR_QUEUE_STATUSES
from ..models import MemoryDurableReceipt

# Statuses this product adds beside upstream's vocabulary (docs/STATUSES.md).
CHECKPOINT_REQUEUED = "checkpoint_requeued"
CHECKPOINT_RECOVERED = "checkpoint_recovered"
CHECKPOINT_SUPERSEDED = "checkpoint_superseded"
ACKNOWLEDGED = "acknowledged"

CHECKPOINT_FAILED = "checkpoint_failed"
CHECKPOINT_SAVED = "checkpoint_saved"
REPAIR_PENDING = "repair_pending"
REPAIR_RUNNING = "repair_running"
TERMINAL_REPAIR_STATUSES = ("repair_failed", "repair_abandoned")
SUCCESS_STATUSES = (
    CHECKPOINT_SAVED,
    "preimage_saved",
    "flush_appended",
    "repair_done",
    CHECKPOINT_RECOVERED,
    CHECKPOINT_SUPERSEDED,
)
# Failures an operator may accept as final with a written reason.
ACKNOWLEDGEABLE_STATUSES = (
    CHECKPOINT_FAILED,
    "repair_failed",
    "repair_abandoned",
    "receipt_orphaned",
    "hash_mismatch",
)
# Statuses that close a failure without replaying it; health never counts them as errors.
RESOLVED_STATUSES = (CHECKPOINT_RECOVERED, CHECKPOINT_SUPERSEDED, ACKNOWLEDGED)


class Outcome(StrEnum):
    REQUEUED = "requeued"
    SUPERSEDED = "superseded"
    FENCED = "fenced"
    IN_FLIGHT = "in_flight"
    NOT_REQUEUEABLE = "not_requeueable"
    STALE = "stale"
    NOT_FOUND = "not_found"


def find_superseding_checkpoint(receipt: MemoryDurableReceipt) -> MemoryDurableReceipt | None:
    """A saved checkpoint of the same generation, written since, covering at least as much.

    A generation's transcript only grows, so a later checkpoint with as many entries holds
    everything the failed one tried to save. A failed row without coverage counts as 0.
    """
    covered = receipt.coverage_entry_count or 0
    return (
        MemoryDurableReceipt.objects.filter(
            session_key=receipt.session_key,
            session_id=receipt.session_id,
            scope="checkpoint",
            status=CHECKPOINT_SAVED,
            created_at__gte=receipt.created_at,
            coverage_entry_count__gte=covered,
        )
        .exclude(pk=receipt.pk)
        .order_by("-coverage_entry_count", "-created_at", "-id")
        .first()
    )


def checkpoint_fence(receipt: MemoryDurableReceipt) -> str | None:
    """Why a checkpoint cannot be retaken for the row's generation, or None when it can."""
    live = (
        Session.objects.filter(session_key=receipt.session_key)
        .values_list("session_id", flat=True)
        .first()
    )
    if live is None:
        return "fenced: session was deleted"
    if live != receipt.session_id:
        return "fenced: session was reset since this checkpoint failed"
    return None


def _is_due(receipt: MemoryDurableReceipt, now: int) -> bool:
    return receipt.next_retry_at_ms is None or receipt.next_retry_at_ms <= now


def classify_requeue(
    receipt: MemoryDurableReceipt, *, now_ms: int | None = None
) -> tuple[Outcome, str]:
    """The outcome a requeue of ``receipt`` would have right now, with a human explanation.

    Repair rows are deliberately not fenced on the session generation: a repair re-distils
    the raw archive on disk, which outlives resets (upstream's repair worker is unfenced too,
    and a reset's own flush is what leaves most repair rows behind).
    """
    now = now_ms if now_ms is not None else timeutil.now_ms()
    status = receipt.status
    if status == REPAIR_RUNNING:
        return Outcome.IN_FLIGHT, "in flight: a repair worker is running it"
    if status == CHECKPOINT_REQUEUED:
        return Outcome.IN_FLIGHT, "in flight: already requeued, waiting for the checkpoint task"
    if status in TERMINAL_REPAIR_STATUSES:
        return Outcome.REQUEUED, "will return to repair_pending with a fresh attempt budget"
    if status in REPAIR_QUEUE_STATUSES:
        if _is_due(receipt, now):
            return Outcome.IN_FLIGHT, "in flight: already due; the next repair tick takes it"
        return Outcome.REQUEUED, "waiting for a retry; requeue makes it due now"
    if status == CHECKPOINT_FAILED:
        saved = find_superseding_checkpoint(receipt)
        if saved is not None:
            return Outcome.SUPERSEDED, f"superseded by {saved.receipt_id}"
        fence = checkpoint_fence(receipt)
        if fence is not None:
            return Outcome.FENCED, fence
        return Outcome.REQUEUED, "a new checkpoint of the live session will be taken"
    if status in SUCCESS_STATUSES:
        return Outcome.NOT_REQUEUEABLE, f"{status} is a success status; nothing to redo"
    if status == ACKNOWLEDGED:
        return Outcome.NOT_REQUEUEABLE, "acknowledged by an operator; nothing to redo"
    return Outcome.NOT_REQUEUEABLE, f"{status} has no requeue rule"


def available_actions(
    receipt: MemoryDurableReceipt, *, now_ms: int | None = None
) -> dict[str, tuple[bool, str]]:
    """Which operator actions apply to the row, each with the reason it is (un)available."""
    outcome, message = classify_requeue(receipt, now_ms=now_ms)
    requeue_ok = outcome in (Outcome.REQUEUED, Outcome.SUPERSEDED)
    if receipt.status in ACKNOWLEDGEABLE_STATUSES:
        acknowledge: tuple[bool, str] = (True, "")
    else:
        acknowledge = (False, "only terminal failures can be acknowledged")
    return {"requeue": (requeue_ok, "" if requeue_ok else message), "acknowledge": acknowledge}
