"""Find work whose enqueue was lost and queue it again (run by every ``repair_tick``).

First the outbox (``enqueue.resend_lost``): every message sent through ``enqueue`` waits
there until its task ends, so anything accepted and not done is sent again, whatever the task,
unless the broker still holds it (docs/RELIABILITY.md states the timings). Then two sweeps by
state, the backstop for rows whose message left the outbox without its work being done (a task
dropped after ``enqueue.MAX_SENDS``, or rows written before the outbox existed): a row or plan
with a message still in the outbox is left to the outbox, so waiting work stays one message.

Work is enqueued after commit; if the broker is down at that moment the row or plan is
saved but no message exists. Repair rows need no help (a requeued repair row is due now and
the repair tick claims it), but a ``checkpoint_requeued`` row and a ``queued`` plan would wait
forever. Re-sending is safe: the checkpoint task and the plan runner are idempotent. Each
re-send bumps ``updated_at`` with a conditional UPDATE, so overlapping ticks send once.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Q

from .. import audit, enqueue, task_limits
from ..checkpoint import DEFAULT_SOURCE
from ..models import MemoryDurableReceipt, RequeuePlan
from ..statuses import CHECKPOINT_REQUEUED

# Derived from the tasks' time limits (receipts_app/task_limits.py): a requeued checkpoint
# untouched for twice its task's hard limit lost its task.
LOST_AFTER_MS = task_limits.LOST_CHECKPOINT_AFTER_SECONDS * 1000
LOST_PLAN_AFTER_MS = task_limits.LOST_PLAN_AFTER_SECONDS * 1000
# A running plan saves progress after every batch; silence this long means its worker died.
STALLED_RUN_AFTER_MS = task_limits.LOST_PLAN_AFTER_SECONDS * 1000
SWEEP_LIMIT = 200


def sweep_lost_work(now_ms: int) -> dict[str, Any]:
    """Send again the outbox's lost messages, then re-enqueue stranded requeued checkpoints
    and stuck plans; returns what was re-sent."""
    outbox = enqueue.resend_lost(now_ms)
    checkpoints = _sweep_checkpoints(now_ms)
    plans = _sweep_plans(now_ms)
    return {"outbox_resent": outbox, "checkpoints_resent": checkpoints, "plans_resent": plans}


def _sweep_checkpoints(now_ms: int) -> list[str]:
    stranded = list(
        MemoryDurableReceipt.objects.filter(
            status=CHECKPOINT_REQUEUED, updated_at__lte=now_ms - LOST_AFTER_MS
        )
        # A row whose message is still in the outbox is the outbox's to send again (or to
        # leave waiting in the broker): never a second message for it.
        .exclude(receipt_id__in=enqueue.outstanding_requeues())
        .order_by("updated_at", "id")
        .values_list("pk", "receipt_id", "session_key", "turn_id", "updated_at", "gateway_id")[
            :SWEEP_LIMIT
        ]
    )
    resent: list[str] = []
    for pk, receipt_id, session_key, turn_id, updated_at, gateway in stranded:
        with transaction.atomic():
            claimed = MemoryDurableReceipt.objects.filter(
                pk=pk, status=CHECKPOINT_REQUEUED, updated_at=updated_at
            ).update(updated_at=max(now_ms, updated_at + 1))
            if not claimed:
                continue
            task_id = enqueue.send(
                enqueue.checkpoint_message(
                    session_key,
                    turn_id=turn_id,
                    requeue_of=receipt_id,
                    source=DEFAULT_SOURCE,
                    gateway=gateway,
                )
            )
            audit.record_event(
                receipt_id=receipt_id,
                session_key=session_key,
                action="requeue_resent",
                from_status=CHECKPOINT_REQUEUED,
                to_status=CHECKPOINT_REQUEUED,
                reason="checkpoint task lost or late; sent again",
                details={"task_id": task_id},
                actor=audit.WORKER,
                gateway=gateway,
            )
        resent.append(receipt_id)
    return resent


def _sweep_plans(now_ms: int) -> list[str]:
    stuck = list(
        RequeuePlan.objects.filter(
            Q(state="queued", updated_at__lte=now_ms - LOST_PLAN_AFTER_MS)
            | Q(state="running", updated_at__lte=now_ms - STALLED_RUN_AFTER_MS)
        )
        .exclude(plan_id__in=enqueue.outstanding_plan_runs())
        .order_by("updated_at")
        .values_list("plan_id", "state", "updated_at")[:SWEEP_LIMIT]
    )
    resent: list[str] = []
    for plan_id, state, updated_at in stuck:
        with transaction.atomic():
            claimed = RequeuePlan.objects.filter(
                plan_id=plan_id, state=state, updated_at=updated_at
            ).update(updated_at=max(now_ms, updated_at + 1))
            if not claimed:
                continue
            enqueue.send(enqueue.plan_runner_message(plan_id))
        resent.append(plan_id)
    return resent
