"""Where a plan's requeued rows are now: recovered, failed again, or still being worked on.

A plan is "done" once every row was requeued; the work it queued finishes later, on the
workers. The rows a plan requeued are the ones its ``requeue`` events say it requeued (the
events carry the plan id); their current status tells how that work ended. The workers'
``requeue_complete`` events carry the plan id too, so the audit log shows each completion.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count

from ..models import MemoryDurableReceipt, ReceiptEvent
from ..statuses import (
    CHECKPOINT_REQUEUED,
    FAILURE_STATUSES,
    REPAIR_QUEUE_STATUSES,
    REPAIR_RUNNING,
    SUCCESS_STATUSES,
)

# Work a requeue queued that no worker has finished yet (a repair waiting on its backoff
# after a failed attempt is still pending: it has attempts left).
PENDING_STATUSES: tuple[str, ...] = (CHECKPOINT_REQUEUED, REPAIR_RUNNING, *REPAIR_QUEUE_STATUSES)


@dataclass(frozen=True)
class PlanFollowUp:
    recovered: int = 0
    failed: int = 0
    pending: int = 0
    other: int = 0  # acknowledged since, or a status no group names

    @property
    def requeued(self) -> int:
        return self.recovered + self.failed + self.pending + self.other

    @property
    def settled(self) -> bool:
        return self.pending == 0


def plan_follow_up(plan_id: str) -> PlanFollowUp:
    """Tally the current status of every row the plan requeued. One grouped query."""
    requeued = ReceiptEvent.objects.filter(
        plan_id=plan_id, action="requeue", outcome="requeued"
    ).values("receipt_id")
    counts = {
        status: n
        for status, n in MemoryDurableReceipt.objects.filter(receipt_id__in=requeued)
        .order_by()
        .values_list("status")
        .annotate(n=Count("id"))
    }
    tally = {"recovered": 0, "failed": 0, "pending": 0, "other": 0}
    for status, n in counts.items():
        if status in SUCCESS_STATUSES:
            tally["recovered"] += n
        elif status in FAILURE_STATUSES:
            tally["failed"] += n
        elif status in PENDING_STATUSES:
            tally["pending"] += n
        else:
            tally["other"] += n
    return PlanFollowUp(**tally)
