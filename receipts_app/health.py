"""Memory health derived from the ledger (DOMAIN.md 9.4), per agent.

Upstream's two signals are kept exactly, with one change this product exists for: rows an
operator resolved (``checkpoint_recovered``, ``checkpoint_superseded``, ``acknowledged``)
never make memory safety "error", even when their reason still mentions a hash mismatch.
A ``checkpoint_requeued`` row is not resolved yet and still counts as a checkpoint failure.
"""

# Every interpolated name is a table or status constant; values are bound parameters.
# ruff: noqa: S608

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connection

from opensquilla_site import timeutil
from sessions_app.keys import normalize_agent_id

from .counts import CountRow, receipt_counts
from .ledger.triggers import T
from .statuses import MEMORY_SAFETY_ERROR_STATUSES as SAFETY_ERROR_STATUSES
from .statuses import REPAIR_QUEUE_STATUSES, RESOLVED_STATUSES

SAMPLE_LIMIT = 1000
BACKLOG_WARNING_COUNT = 10
BACKLOG_WARNING_AGE_MS = 24 * 60 * 60 * 1000


def _in(statuses: Sequence[str]) -> str:
    return "(" + ", ".join(f"'{s}'" for s in statuses) + ")"


# The safety rule of ``_is_safety_error`` in SQL, so only failing rows leave the database.
# (``%%`` is a literal ``%`` for the driver: the statement carries bound parameters.)
_SAFETY_ERROR_SQL = (
    f"status NOT IN {_in(RESOLVED_STATUSES)} AND (status IN {_in(SAFETY_ERROR_STATUSES)} "
    "OR LOWER(status || ' ' || COALESCE(reason, '')) LIKE '%%hash!_mismatch%%' ESCAPE '!' "
    "OR LOWER(status || ' ' || COALESCE(reason, '')) LIKE '%%hash mismatch%%')"
)


def _is_safety_error(status: str, reason: str | None) -> bool:
    """The rule ``_SAFETY_ERROR_SQL`` applies in the database (kept here for reading)."""
    if status in RESOLVED_STATUSES:
        return False
    if status in SAFETY_ERROR_STATUSES:
        return True
    text = f"{status} {reason or ''}".lower()
    return "hash_mismatch" in text or "hash mismatch" in text


def _agent_rows(rows: Sequence[CountRow], agent_id: str | None) -> list[CountRow]:
    return [r for r in rows if agent_id is None or r.agent_id == agent_id]


@dataclass
class _Sample:
    """What one agent's health needs from its rows."""

    checked: int = 0
    failing: list[tuple[int, int, str, str]] = field(default_factory=list)
    oldest_queued: int | None = None


def _read_samples(agents: Sequence[str | None], rows: Sequence[CountRow]) -> list[_Sample]:
    """For every agent (None: the whole ledger), in one query: how many of its
    ``SAMPLE_LIMIT`` newest rows were checked and which of them fail the safety rule (memory
    safety's window, on ``idx_mdr_agent_created``), and the oldest ``created_at`` of its repair
    queue (one index probe per (agent, queued status) the counts say has rows)."""
    parts: list[str] = []
    params: list[Any] = []
    for index, agent in enumerate(agents):
        where = "" if agent is None else "WHERE agent_id = %s"
        window = (
            f"SELECT receipt_id, status, reason, created_at, id FROM {T} {where} "
            f"ORDER BY created_at DESC, id DESC LIMIT {SAMPLE_LIMIT}"
        )
        agent_params = [] if agent is None else [agent]
        parts.append(
            "SELECT 'w' AS kind, %s AS idx, receipt_id, status, created_at, id "
            f"FROM ({window}) AS w{index} WHERE {_SAFETY_ERROR_SQL}"
        )
        params.extend([index, *agent_params])
        parts.append(
            "SELECT 'n', %s, NULL, NULL, "
            f"(SELECT COUNT(*) FROM ({window}) AS n{index}), CAST(NULL AS BIGINT)"
        )
        params.extend([index, *agent_params])
        for row in _agent_rows(rows, agent):
            if row.status in REPAIR_QUEUE_STATUSES:
                parts.append(
                    "SELECT 'q', %s, NULL, NULL, "
                    f"(SELECT MIN(created_at) FROM {T} WHERE agent_id = %s AND status = %s), "
                    "CAST(NULL AS BIGINT)"
                )
                params.extend([index, row.agent_id, row.status])
    samples = [_Sample() for _ in agents]
    if not parts:
        return samples
    with connection.cursor() as cur:
        cur.execute(" UNION ALL ".join(parts), params)
        for kind, idx, receipt_id, status, number, row_id in cur.fetchall():
            sample = samples[int(idx)]
            if kind == "w":
                sample.failing.append((int(number), int(row_id), receipt_id, status))
            elif kind == "n":
                sample.checked = int(number)
            elif number is not None:
                current = sample.oldest_queued
                sample.oldest_queued = number if current is None else min(current, number)
    return samples


def _memory_safety(sample: _Sample) -> dict[str, Any]:
    failing = [(rid, status) for *_order, rid, status in sorted(sample.failing, reverse=True)]
    by_status: dict[str, int] = {}
    for _rid, status in failing:
        by_status[status] = by_status.get(status, 0) + 1
    return {
        "status": "error" if failing else "ok",
        "errorCount": len(failing),
        "errorStatuses": by_status,
        "sampleReceiptIds": [rid for rid, _ in failing[:5]],
        "rowsChecked": sample.checked,
    }


def _semantic_memory(backlog: int, oldest: int | None, now: int) -> dict[str, Any]:
    # Upstream lists the queue (due or not) capped at 1000 and takes the oldest of those.
    count = min(backlog, SAMPLE_LIMIT)
    if count == 0:
        status = "healthy"
        oldest = None
    elif count > BACKLOG_WARNING_COUNT or oldest is None or now - oldest > BACKLOG_WARNING_AGE_MS:
        status = "warning"
    else:
        status = "degraded"
    return {"status": status, "repairBacklogCount": count, "oldestRepairCreatedAt": oldest}


def health_for(
    agents: Sequence[str | None],
    rows: Sequence[CountRow] | None = None,
    *,
    now_ms: int | None = None,
) -> list[dict[str, Any]]:
    """Health of each agent (None: every agent together) in two queries, whatever their number:
    the counts (skipped when ``rows`` is given) and one statement for the samples."""
    rows = receipt_counts() if rows is None else rows
    now = now_ms if now_ms is not None else timeutil.now_ms()
    samples = _read_samples(agents, rows)
    out = []
    for agent, sample in zip(agents, samples, strict=True):
        queued = (r.count for r in _agent_rows(rows, agent) if r.status in REPAIR_QUEUE_STATUSES)
        out.append(
            {
                "agentId": agent,
                "memorySafety": _memory_safety(sample),
                "semanticMemory": _semantic_memory(sum(queued), sample.oldest_queued, now),
            }
        )
    return out


def memory_safety(agent_id: str | None = None) -> dict[str, Any]:
    return memory_health(agent_id)["memorySafety"]


def semantic_memory(agent_id: str | None = None, *, now_ms: int | None = None) -> dict[str, Any]:
    return health_for([_agent(agent_id)], now_ms=now_ms)[0]["semanticMemory"]


def _agent(agent_id: str | None) -> str | None:
    return normalize_agent_id(agent_id) if agent_id else None


def memory_health(agent_id: str | None = None) -> dict[str, Any]:
    """``{"agentId", "memorySafety": {...}, "semanticMemory": {...}}``; None means every agent."""
    return health_for([_agent(agent_id)])[0]


def health_by_agent(rows: Sequence[CountRow] | None = None) -> list[dict[str, Any]]:
    """Health for every agent that has rows in the ledger, sorted by agent id."""
    rows = receipt_counts() if rows is None else rows
    agents = sorted({r.agent_id for r in rows if r.agent_id})
    return health_for(agents, rows)
