"""Per-agent signals of the ledger that metrics, alerts and the liveness page share.

Counts come from ``receipts_app.counts.receipt_counts()`` (exact, cheap to read); the two
"oldest" ages are one grouped query each, over the backlog and the at-risk rows only (both
served by the ``(agent_id, status, created_at)`` and ``(status, next_retry_at_ms, created_at)``
indexes), never over the whole ledger.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Min, Q
from django.db.models.functions import Coalesce

from opensquilla_site import timeutil
from receipts_app.counts import CountRow, receipt_counts
from receipts_app.models import MemoryDurableReceipt
from receipts_app.statuses import (
    FAILURE_STATUSES,
    MEMORY_SAFETY_ERROR_STATUSES,
    REPAIR_QUEUE_STATUSES,
)

# Memory at risk: failures no worker will retry, plus content not safe anywhere yet (a
# requeued checkpoint stays at risk until the worker recovers it).
AT_RISK_STATUSES: tuple[str, ...] = tuple(
    dict.fromkeys(FAILURE_STATUSES + MEMORY_SAFETY_ERROR_STATUSES)
)


@dataclass
class AgentSignals:
    agent: str
    backlog: int = 0
    oldest_due_repair_age_s: float | None = None
    at_risk: int = 0
    oldest_at_risk_age_s: float | None = None


def oldest_due_repairs(now: int) -> dict[str, int]:
    """Per agent, since when (epoch ms) its oldest due repair has been due."""
    rows = (
        MemoryDurableReceipt.objects.order_by()
        .filter(status__in=REPAIR_QUEUE_STATUSES)
        .filter(Q(next_retry_at_ms__isnull=True) | Q(next_retry_at_ms__lte=now))
        .values_list("agent_id")
        .annotate(due_since=Min(Coalesce("next_retry_at_ms", "created_at")))
    )
    return {agent: due_since for agent, due_since in rows}


def oldest_at_risk() -> dict[str, int]:
    """Per agent, the creation time (epoch ms) of its oldest receipt at risk."""
    rows = (
        MemoryDurableReceipt.objects.order_by()
        .filter(status__in=AT_RISK_STATUSES)
        .values_list("agent_id")
        .annotate(oldest=Min("created_at"))
    )
    return {agent: oldest for agent, oldest in rows}


def agent_signals(
    counts: list[CountRow] | None = None, now: int | None = None
) -> dict[str, AgentSignals]:
    now = timeutil.now_ms() if now is None else now
    counts = receipt_counts() if counts is None else counts
    agents: dict[str, AgentSignals] = {}
    for row in counts:
        signals = agents.setdefault(row.agent_id, AgentSignals(row.agent_id))
        if row.status in REPAIR_QUEUE_STATUSES:
            signals.backlog += row.count
        if row.status in AT_RISK_STATUSES:
            signals.at_risk += row.count
    for agent, due_since in oldest_due_repairs(now).items():
        signals = agents.setdefault(agent, AgentSignals(agent))
        signals.oldest_due_repair_age_s = max(0, now - due_since) / 1000
    for agent, oldest in oldest_at_risk().items():
        signals = agents.setdefault(agent, AgentSignals(agent))
        signals.oldest_at_risk_age_s = max(0, now - oldest) / 1000
    return agents
