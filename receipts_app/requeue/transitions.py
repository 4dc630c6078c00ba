"""Where a requeue moves a row: the one transition table for single requeues and plan batches.

``decide_requeue`` (rules) says WHAT happens; ``requeue_transition`` says what that means for
the row: its new status, the other columns written, and the follow-up work sent after commit.
``engine.requeue_receipt`` applies it to one row, ``batch.requeue_batch`` to many rows with one
UPDATE per distinct transition; they differ only in how ``updated_at`` is stamped.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .. import enqueue
from ..checkpoint import DEFAULT_SOURCE
from ..statuses import (
    CHECKPOINT_REQUEUED,
    CHECKPOINT_SUPERSEDED,
    REPAIR_PENDING,
    REPAIR_QUEUE_STATUSES,
    TERMINAL_REPAIR_STATUSES,
)
from .rules import Outcome, Receipt, retakes_checkpoint


class Transition(NamedTuple):
    status: str
    # Columns written besides ``status`` and ``updated_at``; hashable values, so rows whose
    # transitions are equal can share one UPDATE.
    columns: tuple[tuple[str, Any], ...]
    follow_up: enqueue.Message | None

    def update(self, stamp: Any) -> dict[str, Any]:
        """The UPDATE's values; ``stamp`` is the new ``updated_at`` (a value or an expression)."""
        return {"status": self.status, **dict(self.columns), "updated_at": stamp}


def requeue_transition(
    row: Receipt, outcome: Outcome, *, now_ms: int, superseded_by: str | None
) -> Transition | None:
    """The move for ``outcome`` (from ``decide_requeue``); None when the row stays as it is.

    - superseded: ``checkpoint_superseded``, linked to the covering saved checkpoint;
    - requeued ``checkpoint_failed``: ``checkpoint_requeued`` and a checkpoint task that
      retakes it for the live generation;
    - requeued repair row: ``repair_pending``, due now, with a fresh attempt budget
      (``attempt_count = 0``), and a repair task.
    """
    if outcome is Outcome.SUPERSEDED:
        return Transition(CHECKPOINT_SUPERSEDED, (("resolved_by_receipt_id", superseded_by),), None)
    if outcome is not Outcome.REQUEUED:
        return None
    if retakes_checkpoint(row):
        message = enqueue.checkpoint_message(
            row.session_key,
            turn_id=row.turn_id,
            requeue_of=row.receipt_id,
            source=DEFAULT_SOURCE,
            gateway=row.gateway_id,
        )
        return Transition(CHECKPOINT_REQUEUED, (("resolved_by_receipt_id", None),), message)
    if row.status in TERMINAL_REPAIR_STATUSES or row.status in REPAIR_QUEUE_STATUSES:
        return Transition(
            REPAIR_PENDING,
            (("next_retry_at_ms", now_ms), ("attempt_count", 0)),
            enqueue.repair_message(row.receipt_id, gateway=row.gateway_id),
        )
    raise AssertionError(f"no requeue transition for {row.status}")  # pragma: no cover
