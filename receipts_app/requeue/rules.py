"""What a requeue or an acknowledge WOULD do to one receipt (docs/STATUSES.md#requeue-outcomes). No writes.

The same rules serve the dry run of a plan, the console's action buttons and the requeue
itself, so an operator is never shown an outcome the engine would not produce.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Any, NamedTuple, Protocol

from django.db.models import OuterRef, Subquery
from django.db.models.functions import Coalesce

from opensquilla_site import timeutil
from sessions_app.gateways import using_gateway
from sessions_app.models import Session

from ..ledger import live_session_id
from ..models import MemoryDurableReceipt
from ..restore import loss_for_receipt
from ..statuses import (
    ACKNOWLEDGEABLE_STATUSES,
    ACKNOWLEDGED,
    CHECKPOINT_FAILED,
    CHECKPOINT_REQUEUED,
    CHECKPOINT_SAVED,
    REPAIR_QUEUE_STATUSES,
    REPAIR_RUNNING,
    RESOLVED_STATUSES,
    SCRUB_VERDICT_STATUSES,
    SUCCESS_STATUSES,
    TERMINAL_REPAIR_STATUSES,
)


class Outcome(StrEnum):
    REQUEUED = "requeued"
    SUPERSEDED = "superseded"
    FENCED = "fenced"
    IN_FLIGHT = "in_flight"
    NOT_REQUEUEABLE = "not_requeueable"
    STALE = "stale"
    NOT_FOUND = "not_found"


def _superseding_filter(receipt: Receipt) -> dict[str, Any]:
    return {
        "gateway_id": receipt.gateway_id,
        "session_key": receipt.session_key,
        "session_id": receipt.session_id,
        "scope": "checkpoint",
        "status": CHECKPOINT_SAVED,
        "created_at__gte": receipt.created_at,
        "coverage_entry_count__gte": receipt.coverage_entry_count or 0,
    }


_SUPERSEDING_ORDER = ("-coverage_entry_count", "-created_at", "-id")


def find_superseding_checkpoint(receipt: Receipt) -> MemoryDurableReceipt | None:
    """A saved checkpoint of the same generation, written since, covering at least as much.

    A generation's transcript only grows, so a later checkpoint with as many entries holds
    everything the failed one tried to save. A failed row without coverage counts as 0.
    """
    return (
        MemoryDurableReceipt.objects.filter(**_superseding_filter(receipt))
        .exclude(pk=receipt.pk)
        .order_by(*_SUPERSEDING_ORDER)
        .first()
    )


def _fence_reason(receipt: Receipt, live: str | None) -> str | None:
    """Why a checkpoint cannot be retaken for the row's generation, or None when it can."""
    if live is None:
        return "fenced: session was deleted"
    if live != receipt.session_id:
        return "fenced: session was reset since this checkpoint failed"
    return None


def retakes_checkpoint(receipt: Receipt) -> bool:
    """A row a requeue retakes as a checkpoint of the live transcript: a failed checkpoint, or
    a saved one whose file the scrub found missing or damaged (docs/STATUSES.md#scrub)."""
    if receipt.status == CHECKPOINT_FAILED:
        return True
    return receipt.status in SCRUB_VERDICT_STATUSES and receipt.scope == "checkpoint"


class RowFacts(NamedTuple):
    """A row's columns the plans use, without building a model instance.

    The rules read the first nine and the gateway; plan execution also needs the stamp its
    compare-and-set pins and the turn a requeued checkpoint retakes.
    """

    pk: int
    receipt_id: str
    session_key: str
    session_id: str
    status: str
    reason: str | None
    created_at: int
    coverage_entry_count: int | None
    next_retry_at_ms: int | None
    updated_at: int
    turn_id: str | None
    gateway_id: str
    # A saved checkpoint the scrub found unsafe is retaken; a repair row in the same status
    # is not (``retakes_checkpoint``).
    scope: str = ""


ROW_FACT_FIELDS = ("pk", *RowFacts._fields[1:])

# A stored row or its facts: the rules need nothing else.
Receipt = MemoryDurableReceipt | RowFacts


class RequeueContext(Protocol):
    """What the rules need beyond the row itself: the only two lookups they make."""

    def superseded_by(self, receipt: Receipt) -> str | None:
        """receipt_id of the saved checkpoint that supersedes a failed one, if any."""

    def live_session_id(self, receipt: Receipt) -> str | None:
        """The live generation of the receipt's session; None when the session is gone."""


class _OnDemand:
    """One row at a time: each lookup is a query, made only if the rule reaches it."""

    def superseded_by(self, receipt: Receipt) -> str | None:
        saved = find_superseding_checkpoint(receipt)
        return saved.receipt_id if saved is not None else None

    def live_session_id(self, receipt: Receipt) -> str | None:
        with using_gateway(receipt.gateway_id):
            return live_session_id(receipt.session_key)


ON_DEMAND: RequeueContext = _OnDemand()


class BatchContext:
    """Both lookups for a whole batch, fetched up front in one query.

    Only ``checkpoint_failed`` rows consult them, so a batch without any costs nothing.
    The superseding checkpoint is found by the same filter and order as
    ``find_superseding_checkpoint``, as a correlated subquery per failed row, and the live
    generation as a second one; the rows are read back by primary key as they are stored.
    """

    def __init__(self, rows: Iterable[Receipt]) -> None:
        failed = [r for r in rows if retakes_checkpoint(r)]
        # By (gateway, session key): a batch may span gateways, whose keys overlap.
        self._live: dict[tuple[str, str], str | None] = {}
        self._saved: dict[int, str | None] = {}
        if not failed:
            return
        best = (
            MemoryDurableReceipt.objects.filter(
                gateway_id=OuterRef("gateway_id"),
                session_key=OuterRef("session_key"),
                session_id=OuterRef("session_id"),
                scope="checkpoint",
                status=CHECKPOINT_SAVED,
                created_at__gte=OuterRef("created_at"),
                coverage_entry_count__gte=Coalesce(OuterRef("coverage_entry_count"), 0),
            )
            .exclude(pk=OuterRef("pk"))
            .order_by(*_SUPERSEDING_ORDER)
            .values("receipt_id")[:1]
        )
        live = Session.objects.filter(
            gateway_id=OuterRef("gateway_id"), session_key=OuterRef("session_key")
        ).values("session_id")
        found = (
            MemoryDurableReceipt.objects.filter(pk__in=[r.pk for r in failed])
            .annotate(saved_id=Subquery(best), live_id=Subquery(live[:1]))
            .values_list("pk", "gateway_id", "session_key", "saved_id", "live_id")
        )
        for pk, gateway, session_key, saved_id, live_id in found:
            self._saved[pk] = saved_id
            self._live[(gateway, session_key)] = live_id

    # A row outside the batch (or deleted since it was read) is looked up directly.
    def superseded_by(self, receipt: Receipt) -> str | None:
        if receipt.pk not in self._saved:
            return ON_DEMAND.superseded_by(receipt)
        return self._saved[receipt.pk]

    def live_session_id(self, receipt: Receipt) -> str | None:
        key = (receipt.gateway_id, receipt.session_key)
        if key not in self._live:
            return ON_DEMAND.live_session_id(receipt)
        return self._live[key]


def _is_due(receipt: Receipt, now: int) -> bool:
    return receipt.next_retry_at_ms is None or receipt.next_retry_at_ms <= now


def decide_requeue(
    receipt: Receipt, *, now_ms: int, context: RequeueContext
) -> tuple[Outcome, str, str | None]:
    """THE requeue rule: (outcome, explanation, superseding receipt_id) for one row.

    Every path (single requeue, console buttons, plan dry run and plan execution) ends
    here; they differ only in how ``context`` fetches the two lookups.

    Repair rows are deliberately not fenced on the session generation: a repair re-distils
    the raw archive on disk, which outlives resets (upstream's repair worker is unfenced too,
    and a reset's own flush is what leaves most repair rows behind).
    """
    status = receipt.status
    if status == REPAIR_RUNNING:
        return Outcome.IN_FLIGHT, "in flight: a repair worker is running it", None
    if status == CHECKPOINT_REQUEUED:
        return (
            Outcome.IN_FLIGHT,
            "in flight: already requeued, waiting for the checkpoint task",
            None,
        )
    if status in TERMINAL_REPAIR_STATUSES:
        return (
            Outcome.REQUEUED,
            "will return to repair_pending with a fresh attempt budget",
            None,
        )
    if status in REPAIR_QUEUE_STATUSES:
        if _is_due(receipt, now_ms):
            return (
                Outcome.IN_FLIGHT,
                "in flight: already due; the next repair tick takes it",
                None,
            )
        return Outcome.REQUEUED, "waiting for a retry; requeue makes it due now", None
    if retakes_checkpoint(receipt):
        saved_id = context.superseded_by(receipt)
        if saved_id is not None:
            return Outcome.SUPERSEDED, f"superseded by {saved_id}", saved_id
        fence = _fence_reason(receipt, context.live_session_id(receipt))
        if fence is not None:
            return Outcome.FENCED, fence, None
        if receipt.status in SCRUB_VERDICT_STATUSES:
            # A saved checkpoint whose file is gone or damaged: a retake restores it only
            # while the transcript it covered is still whole (else the loss is named).
            return decide_retake(_receipt_row(receipt))
        return Outcome.REQUEUED, "a new checkpoint of the live session will be taken", None
    if status in SUCCESS_STATUSES:
        return Outcome.NOT_REQUEUEABLE, f"{status} is a success status; nothing to redo", None
    if status == ACKNOWLEDGED:
        return Outcome.NOT_REQUEUEABLE, "acknowledged by an operator; nothing to redo", None
    return Outcome.NOT_REQUEUEABLE, f"{status} has no requeue rule", None


def _receipt_row(receipt: Receipt) -> MemoryDurableReceipt:
    """The model row of ``receipt`` (a plan's rules read bare row facts), in any gateway."""
    if isinstance(receipt, MemoryDurableReceipt):
        return receipt
    with using_gateway(None):
        return MemoryDurableReceipt.objects.get(pk=receipt.pk)


def decide_retake(receipt: MemoryDurableReceipt) -> tuple[Outcome, str, str | None]:
    """The requeue rule of a saved checkpoint whose file is missing or damaged.

    Retake (a new checkpoint of the live session) is the way out only when the transcript the
    checkpoint covered is still whole here (``restore.loss``: proven by the coverage hash, in
    the live generation). Otherwise nothing can be retaken: the answer names the loss, and
    the way out is acknowledging it with a reason. Reads the generation's transcripts (and, for
    a damaged file on this gateway's host, the checkpoint files).
    """
    loss = loss_for_receipt(receipt)
    if loss.retake_possible:
        return (
            Outcome.REQUEUED,
            f"a new checkpoint of the live session will be taken: {loss.retake_reason}",
            None,
        )
    return (
        Outcome.NOT_REQUEUEABLE,
        f"a retake cannot restore it ({loss.retake_reason}). {loss.summary} "
        "Acknowledge the loss with a reason.",
        None,
    )


def classify_requeue(
    receipt: Receipt,
    *,
    now_ms: int | None = None,
    context: RequeueContext | None = None,
) -> tuple[Outcome, str]:
    """The outcome a requeue of ``receipt`` would have right now, with a human explanation."""
    now = now_ms if now_ms is not None else timeutil.now_ms()
    outcome, message, _saved = decide_requeue(
        receipt, now_ms=now, context=context if context is not None else ON_DEMAND
    )
    return outcome, message


def available_actions(
    receipt: MemoryDurableReceipt, *, now_ms: int | None = None
) -> dict[str, tuple[bool, str]]:
    """Which operator actions apply to the row, each with the reason it is (un)available."""
    # A batch of one: both lookups of a failed checkpoint in one query.
    outcome, message = classify_requeue(receipt, now_ms=now_ms, context=BatchContext([receipt]))
    requeue_ok = outcome in ACTIONABLE_OUTCOMES
    return {
        "requeue": (requeue_ok, "" if requeue_ok else message),
        "acknowledge": acknowledge_rule(receipt.status),
    }


# A requeue with one of these outcomes changes the row; the others only explain why not.
ACTIONABLE_OUTCOMES = (Outcome.REQUEUED, Outcome.SUPERSEDED)


def acknowledge_rule(status: str) -> tuple[bool, str]:
    """Whether a row in ``status`` may be acknowledged, with the reason when it may not."""
    if status in ACKNOWLEDGEABLE_STATUSES:
        return True, ""
    if status == ACKNOWLEDGED:
        return False, "already acknowledged"
    if status in RESOLVED_STATUSES or status in SUCCESS_STATUSES:
        return False, f"{status} is not a failure; there is nothing to accept"
    if status in (*REPAIR_QUEUE_STATUSES, REPAIR_RUNNING, CHECKPOINT_REQUEUED):
        return (
            False,
            f"{status} is still being worked on; only terminal failures can be acknowledged",
        )
    return False, f"{status} is not a terminal failure; only terminal failures can be acknowledged"


def requeueable_receipt_ids(rows: Iterable[Receipt], *, now_ms: int | None = None) -> set[str]:
    """The rows a requeue would act on right now (``requeued`` or ``superseded``).

    The rule of ``available_actions`` for a whole page of rows, with both lookups made in
    one query for the page (``BatchContext``), so a list can offer the button exactly where
    it would do something (a fenced checkpoint gets none).
    """
    rows = list(rows)
    now = now_ms if now_ms is not None else timeutil.now_ms()
    context = BatchContext(rows)
    return {
        row.receipt_id
        for row in rows
        if decide_requeue(row, now_ms=now, context=context)[0] in ACTIONABLE_OUTCOMES
    }
