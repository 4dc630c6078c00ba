"""Memory health derived from the ledger (docs/UPSTREAM.md#health), per agent: upstream's
two signals and one of ours.

Every count comes with the filter (``ReceiptFilter.to_params()``) that lists exactly the rows
counted: the agent (``agent_id``) and the finding's statuses, over every scope, which is how the
counts are summed from ``receipts_app.counts``. A count and the link a page builds from its
filter cannot disagree.

- ``memorySafety``: "error" while content is not safe anywhere: rows in
  ``MEMORY_SAFETY_ERROR_STATUSES`` (a requeued checkpoint stays one until the worker recovers
  it). Unlike upstream, such a row does not age out of a 1000-row window: it stays at risk
  until it is recovered, superseded or acknowledged. Upstream's text heuristic (a hash
  mismatch named in a row's status or reason) is kept over the 1000 most recent rows, as
  upstream bounds it; rows an operator resolved never count (docs/STATUSES.md).
- ``semanticMemory``: the repair backlog (``REPAIR_QUEUE_STATUSES``, due or not); the status
  rule is upstream's.
- ``terminalRepairs``: repairs whose automatic budget is spent (``repair_failed``,
  ``repair_abandoned``). Upstream's health counts them nowhere; they wait for an operator.

One read of ``receipt_counts()`` serves every agent of ``health_by_agent``.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Min, QuerySet

from opensquilla_site import timeutil
from sessions_app.keys import agent_prefix

from .counts import receipt_counts
from .ledger import literal_prefix
from .models import MemoryDurableReceipt
from .selectors import ReceiptFilter, filter_receipts
from .statuses import (
    MEMORY_SAFETY_ERROR_STATUSES,
    REPAIR_QUEUE_STATUSES,
    RESOLVED_STATUSES,
    TERMINAL_REPAIR_STATUSES,
)

SAMPLE_LIMIT = 1000
SAMPLE_IDS = 5
BACKLOG_WARNING_COUNT = 10
BACKLOG_WARNING_AGE_MS = 24 * 60 * 60 * 1000
# Rows the hash-mismatch heuristic names at most (their ids are the finding's filter).
HASH_MISMATCH_ID_LIMIT = 100
_HASH_MISMATCH_MARKERS = ("hash_mismatch", "hash mismatch")


def _filter(agent_id: str | None, statuses: tuple[str, ...]) -> ReceiptFilter:
    return ReceiptFilter(agent=agent_id or None, statuses=statuses)


class _Counts:
    """The counts health reports, read from ``counts.receipt_counts()`` (exact per agent, scope
    and status), plus the oldest queued repair per agent (one grouped query).

    A finding's filter is ``agent`` (the ``agent_id`` column) and its statuses over every
    scope, so summing the counts table over scopes counts exactly the rows the filter lists.
    """

    def __init__(self, agent_id: str | None) -> None:
        self._counts: dict[tuple[str, str], int] = {}
        for row in receipt_counts():
            key = (row.agent_id, row.status)
            self._counts[key] = self._counts.get(key, 0) + row.count
        queue = filter_receipts(_filter(agent_id, REPAIR_QUEUE_STATUSES)).order_by()
        oldest = queue.values_list("agent_id").annotate(m=Min("created_at"))
        self._oldest = dict(oldest.values_list("agent_id", "m"))

    def by_status(self, agent_id: str | None, statuses: tuple[str, ...]) -> dict[str, int]:
        out: dict[str, int] = {}
        for status in statuses:
            n = sum(
                count
                for (agent, row_status), count in self._counts.items()
                if row_status == status and (agent_id is None or agent == agent_id)
            )
            if n:
                out[status] = n
        return out

    def oldest_queued(self, agent_id: str | None) -> int | None:
        if agent_id is not None:
            return self._oldest.get(agent_id)
        return min(self._oldest.values(), default=None)


def _window(agent_id: str | None) -> tuple[int, list[str]]:
    """Upstream's heuristic over the agent's 1000 most recent rows (under its literal key
    prefix, as upstream reads them): ``(rows checked, ids newest first)`` of rows whose status
    or reason names a hash mismatch, resolved rows and the error statuses excluded."""
    recent: QuerySet[MemoryDurableReceipt] = MemoryDurableReceipt.objects.all()
    if agent_id:
        recent = literal_prefix(recent, "session_key", agent_prefix(agent_id))
    rows = list(
        recent.order_by("-created_at", "-id").values_list("receipt_id", "status", "reason")[
            :SAMPLE_LIMIT
        ]
    )
    named = [
        rid
        for rid, status, reason in rows
        if status not in RESOLVED_STATUSES
        and status not in MEMORY_SAFETY_ERROR_STATUSES
        and any(m in f"{status} {reason or ''}".lower() for m in _HASH_MISMATCH_MARKERS)
    ]
    return len(rows), named[:HASH_MISMATCH_ID_LIMIT]


def _memory_safety(agent_id: str | None, counts: _Counts) -> dict[str, Any]:
    at_risk = _filter(agent_id, MEMORY_SAFETY_ERROR_STATUSES)
    by_status = counts.by_status(agent_id, MEMORY_SAFETY_ERROR_STATUSES)
    count = sum(by_status.values())
    samples = (
        list(filter_receipts(at_risk).values_list("receipt_id", flat=True)[:SAMPLE_IDS])
        if count
        else []
    )
    checked, mismatched = _window(agent_id)
    return {
        "status": "error" if count or mismatched else "ok",
        "errorCount": count,
        "errorStatuses": by_status,
        "sampleReceiptIds": (samples + mismatched)[:SAMPLE_IDS],
        "rowsChecked": checked,
        "filter": at_risk.to_params(),
        # Exactly the rows named, by id: no filter parameter expresses the text heuristic.
        "hashMismatchCount": len(mismatched),
        "hashMismatchFilter": ReceiptFilter(receipt_ids=tuple(mismatched)).to_params()
        if mismatched
        else None,
    }


def _semantic_memory(agent_id: str | None, counts: _Counts, now: int) -> dict[str, Any]:
    count = sum(counts.by_status(agent_id, REPAIR_QUEUE_STATUSES).values())
    oldest = counts.oldest_queued(agent_id)
    if count == 0:
        status = "healthy"
    elif count > BACKLOG_WARNING_COUNT or oldest is None or now - oldest > BACKLOG_WARNING_AGE_MS:
        status = "warning"
    else:
        status = "degraded"
    return {
        "status": status,
        "repairBacklogCount": count,
        "oldestRepairCreatedAt": oldest,
        "filter": _filter(agent_id, REPAIR_QUEUE_STATUSES).to_params(),
    }


def _terminal_repairs(agent_id: str | None, counts: _Counts) -> dict[str, Any]:
    return {
        "count": sum(counts.by_status(agent_id, TERMINAL_REPAIR_STATUSES).values()),
        "filter": _filter(agent_id, TERMINAL_REPAIR_STATUSES).to_params(),
    }


def _health(agent_id: str | None, counts: _Counts, now: int) -> dict[str, Any]:
    return {
        "agentId": agent_id,
        "memorySafety": _memory_safety(agent_id, counts),
        "semanticMemory": _semantic_memory(agent_id, counts, now),
        "terminalRepairs": _terminal_repairs(agent_id, counts),
    }


def memory_health(agent_id: str | None = None, *, now_ms: int | None = None) -> dict[str, Any]:
    """``{"agentId", "memorySafety", "semanticMemory", "terminalRepairs"}``; None: every agent."""
    now = now_ms if now_ms is not None else timeutil.now_ms()
    return _health(agent_id, _Counts(agent_id), now)


def health_by_agent(*, now_ms: int | None = None) -> list[dict[str, Any]]:
    """Health for every agent that has rows in the ledger, sorted by agent id."""
    now = now_ms if now_ms is not None else timeutil.now_ms()
    agents = (
        MemoryDurableReceipt.objects.exclude(agent_id="")
        .order_by("agent_id")
        .values_list("agent_id", flat=True)
        .distinct()
    )
    counts = _Counts(None)
    return [_health(agent, counts, now) for agent in agents]
