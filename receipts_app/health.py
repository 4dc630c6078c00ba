"""Memory health derived from the ledger (docs/UPSTREAM.md#health), per agent.

Upstream's two signals are kept exactly, with one change this product exists for: rows an
operator resolved (``checkpoint_recovered``, ``checkpoint_superseded``, ``acknowledged``)
never make memory safety "error", even when their reason still mentions a hash mismatch.
A ``checkpoint_requeued`` row is not resolved yet and still counts as a checkpoint failure.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from opensquilla_site import timeutil
from sessions_app.keys import agent_prefix

from .ledger import literal_prefix
from .models import MemoryDurableReceipt
from .statuses import MEMORY_SAFETY_ERROR_STATUSES as SAFETY_ERROR_STATUSES
from .statuses import REPAIR_QUEUE_STATUSES, RESOLVED_STATUSES

SAMPLE_LIMIT = 1000
BACKLOG_WARNING_COUNT = 10
BACKLOG_WARNING_AGE_MS = 24 * 60 * 60 * 1000


def _scoped(agent_id: str | None) -> QuerySet[MemoryDurableReceipt]:
    qs: QuerySet[MemoryDurableReceipt] = MemoryDurableReceipt.objects.all()
    if agent_id:
        qs = literal_prefix(qs, "session_key", agent_prefix(agent_id))
    return qs


def _is_safety_error(status: str, reason: str | None) -> bool:
    if status in RESOLVED_STATUSES:
        return False
    if status in SAFETY_ERROR_STATUSES:
        return True
    text = f"{status} {reason or ''}".lower()
    return "hash_mismatch" in text or "hash mismatch" in text


def memory_safety(agent_id: str | None = None) -> dict[str, Any]:
    recent = list(
        _scoped(agent_id)
        .order_by("-created_at", "-id")
        .values_list("receipt_id", "status", "reason")[:SAMPLE_LIMIT]
    )
    failing = [(rid, status) for rid, status, reason in recent if _is_safety_error(status, reason)]
    by_status: dict[str, int] = {}
    for _rid, status in failing:
        by_status[status] = by_status.get(status, 0) + 1
    return {
        "status": "error" if failing else "ok",
        "errorCount": len(failing),
        "errorStatuses": by_status,
        "sampleReceiptIds": [rid for rid, _ in failing[:5]],
        "rowsChecked": len(recent),
    }


def semantic_memory(agent_id: str | None = None, *, now_ms: int | None = None) -> dict[str, Any]:
    now = now_ms if now_ms is not None else timeutil.now_ms()
    # Upstream lists the queue (due or not) capped at 1000 and takes the oldest of those.
    created = list(
        _scoped(agent_id)
        .filter(status__in=REPAIR_QUEUE_STATUSES)
        .order_by("created_at", "id")
        .values_list("created_at", flat=True)[:SAMPLE_LIMIT]
    )
    count = len(created)
    oldest = min(created) if created else None
    if count == 0:
        status = "healthy"
    elif count > BACKLOG_WARNING_COUNT or oldest is None or now - oldest > BACKLOG_WARNING_AGE_MS:
        status = "warning"
    else:
        status = "degraded"
    return {"status": status, "repairBacklogCount": count, "oldestRepairCreatedAt": oldest}


def memory_health(agent_id: str | None = None) -> dict[str, Any]:
    """``{"agentId", "memorySafety": {...}, "semanticMemory": {...}}``; None means every agent."""
    return {
        "agentId": agent_id,
        "memorySafety": memory_safety(agent_id),
        "semanticMemory": semantic_memory(agent_id),
    }


def health_by_agent() -> list[dict[str, Any]]:
    """Health for every agent that has rows in the ledger, sorted by agent id."""
    agents = (
        MemoryDurableReceipt.objects.exclude(agent_id="")
        .order_by("agent_id")
        .values_list("agent_id", flat=True)
        .distinct()
    )
    return [memory_health(agent) for agent in agents]
