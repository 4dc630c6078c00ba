"""The requeue engine (PRODUCT.md 3): the one service every surface calls.

- ``rules``: what a requeue would do (``classify_requeue``, ``available_actions``), no writes
- ``engine``: ``requeue_receipt``, ``acknowledge_receipt``, ``complete_checkpoint_requeue``
- ``plans``: frozen-filter requeue plans with a dry run and batched execution
- ``follow_up``: where a plan's requeued rows are now (recovered, failed again, pending)
- ``sweep``: re-sending work whose enqueue was lost (called by ``repair_tick``)
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
    execute_requeue_plan,
    fan_out_requeue_plan,
    get_requeue_plan,
    plan_queryset,
    run_requeue_plan,
)
from .rules import (
    ACKNOWLEDGEABLE_STATUSES,
    ACKNOWLEDGED,
    CHECKPOINT_RECOVERED,
    CHECKPOINT_REQUEUED,
    CHECKPOINT_SUPERSEDED,
    RESOLVED_STATUSES,
    Outcome,
    available_actions,
    classify_requeue,
)
from .sweep import sweep_lost_work

__all__ = [
    "ACKNOWLEDGEABLE_STATUSES",
    "ACKNOWLEDGED",
    "CHECKPOINT_RECOVERED",
    "CHECKPOINT_REQUEUED",
    "CHECKPOINT_SUPERSEDED",
    "RESOLVED_STATUSES",
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
    "execute_requeue_plan",
    "fan_out_requeue_plan",
    "get_requeue_plan",
    "plan_follow_up",
    "plan_queryset",
    "requeue_receipt",
    "run_requeue_plan",
    "sweep_lost_work",
]
