"""The requeue engine (docs/STATUSES.md#requeue-outcomes): the one service every surface calls
to requeue or acknowledge.

- ``rules``: what a requeue would do (``decide_requeue``, ``available_actions``), no writes
- ``transitions``: where a requeue moves a row and the work it sends (one table)
- ``engine``: ``requeue_receipt``, ``acknowledge_receipt``, ``complete_checkpoint_requeue``
- ``batch``: ``requeue_batch``, the same requeue for a plan's batch of rows
- ``retake``: the requeued checkpoint's task body (``retake_checkpoint``)
- ``plans``: frozen-filter requeue plans: dry run, ``start_requeue_plan`` (queues it once),
  ``run_requeue_plan`` (the runner task's body)
- ``follow_up``: where a plan's requeued rows are now (recovered, failed again, pending)
- ``sweep``: re-sending work whose enqueue was lost (called by ``repair_tick``)

Work leaves through ``receipts_app.enqueue``; nothing here imports the tasks.
"""

from .engine import (
    AcknowledgeResult,
    AckOutcome,
    RequeueResult,
    acknowledge_receipt,
    complete_checkpoint_requeue,
    requeue_receipt,
)
from .follow_up import PlanFollowUp, plan_follow_up
from .plans import (
    create_requeue_plan,
    fan_out_requeue_plan,
    get_requeue_plan,
    plan_queryset,
    plan_warnings,
    run_requeue_plan,
    start_requeue_plan,
)
from .retake import retake_checkpoint
from .rules import Outcome, available_actions, classify_requeue
from .sweep import sweep_lost_work

__all__ = [
    "AckOutcome",
    "AcknowledgeResult",
    "Outcome",
    "PlanFollowUp",
    "RequeueResult",
    "acknowledge_receipt",
    "available_actions",
    "classify_requeue",
    "complete_checkpoint_requeue",
    "create_requeue_plan",
    "fan_out_requeue_plan",
    "get_requeue_plan",
    "plan_follow_up",
    "plan_queryset",
    "plan_warnings",
    "requeue_receipt",
    "retake_checkpoint",
    "run_requeue_plan",
    "start_requeue_plan",
    "sweep_lost_work",
]
