"""Per (gateway, agent) signals of the ledger that metrics, alerts and the liveness page share.

The same agent name on two gateways is two agents (session keys overlap between gateways by
construction), so every signal is keyed ``(gateway, agent)``; counts scoped to one gateway
(``sessions_app.gateways.gateway_scope``) give that gateway's signals only.

Each (gateway, agent)'s one state and what health's hash-mismatch heuristic found come from
``receipts_app.health.verdicts`` (the match probe, and the flagged agents' windows only), so
the alerts and ``/metrics`` say "at risk" exactly where the cards do.

Counts come from ``receipts_app.counts.receipt_counts()`` (exact, cheap to read); the two
"oldest" ages are one statement each of index probes, one per agent or (agent, status) that
the counts say has rows, so a scrape reads a few index pages whatever the ledger's size (a
grouped MIN over the at-risk rows took 380 ms at 1M rows in bench/scale.py).
"""

# Interpolated: the table name and status constants; agents and times are bound parameters.
# ruff: noqa: S608

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import connection

from opensquilla_site import timeutil
from receipts_app.counts import CountRow, receipt_counts
from receipts_app.health import HashMismatches, Verdicts, at_risk_by_gateway_agent, verdicts
from receipts_app.ledger.triggers import T
from receipts_app.statuses import AT_RISK_STATUSES, REPAIR_QUEUE_STATUSES, SCRUB_VERDICT_STATUSES
from receipts_app.verdict import State
from sessions_app.gateways import DEFAULT_GATEWAY

# idx_mdr_repair_due's condition as Django writes it (receipts_app/models.py); SQLite uses a
# partial index only when the query repeats its condition term for term.
_REPAIR_QUEUE_CONDITION = '"status" IN (' + ", ".join(f"'{s}'" for s in REPAIR_QUEUE_STATUSES) + ")"
# idx_mdr_unsafe_found's, the same way.
_SCRUB_VERDICT_CONDITION = (
    '"status" IN (' + ", ".join(f"'{s}'" for s in SCRUB_VERDICT_STATUSES) + ")"
)


# (gateway, agent): the key of every per-agent signal.
Key = tuple[str, str]


@dataclass
class AgentSignals:
    agent: str
    gateway: str = DEFAULT_GATEWAY
    backlog: int = 0
    oldest_due_repair_age_s: float | None = None
    at_risk: int = 0
    oldest_at_risk_age_s: float | None = None
    # The one state (health.verdicts) and the heuristic's rows, with the oldest one's age.
    state: State = State.OK
    hash_mismatches: HashMismatches = field(default_factory=HashMismatches)
    oldest_hash_mismatch_age_s: float | None = None

    @property
    def at_risk_for_s(self) -> float | None:
        """How long its memory has been at risk: the oldest of its rows at risk by status and
        of the rows the heuristic found (None while its state is not ``at_risk``)."""
        ages = [
            a for a in (self.oldest_at_risk_age_s, self.oldest_hash_mismatch_age_s) if a is not None
        ]
        return max(ages) if self.state == State.AT_RISK and ages else None


def _probe(parts: list[str], params: list[Any]) -> dict[Key, int]:
    """Run one ``UNION ALL`` of ``(gateway, agent, value)`` probes; the smallest value per
    (gateway, agent)."""
    if not parts:
        return {}
    out: dict[Key, int] = {}
    with connection.cursor() as cur:
        cur.execute(" UNION ALL ".join(parts), params)
        for gateway, agent, value in cur.fetchall():
            if value is not None:
                key = (gateway, agent)
                out[key] = min(value, out.get(key, value))
    return out


def oldest_due_repairs(now: int, counts: list[CountRow]) -> dict[Key, int]:
    """Per (gateway, agent), since when (epoch ms) its oldest due repair has been due: the smallest
    ``COALESCE(next_retry_at_ms, created_at)`` not after ``now``, one probe of
    ``idx_mdr_repair_due`` per (gateway, agent) of the counts with queued repairs (the WHERE repeats that partial
    index's condition word for word, so every backend's planner may use it)."""
    pairs = sorted(
        {
            (r.gateway_id, r.agent_id)
            for r in counts
            if r.status in REPAIR_QUEUE_STATUSES and r.count
        }
    )
    parts = [
        f"SELECT %s, %s, (SELECT MIN(COALESCE(next_retry_at_ms, created_at)) FROM {T} "
        f"WHERE {_REPAIR_QUEUE_CONDITION} AND agent_id = %s AND gateway_id = %s "
        "AND COALESCE(next_retry_at_ms, created_at) <= %s)"
        for _ in pairs
    ]
    params = [p for gateway, agent in pairs for p in (gateway, agent, agent, gateway, now)]
    return _probe(parts, params)


def oldest_at_risk(counts: list[CountRow]) -> dict[Key, int]:
    """Per (gateway, agent), since when (epoch ms) its oldest receipt at risk has been at risk:
    one index probe per (gateway, agent, status) the counts say has rows (so counts scoped to
    one gateway read only that gateway's rows).

    A failure is at risk from when it was written (``created_at``, ``idx_mdr_agent_status``).
    A checkpoint the scrub found missing or damaged was saved, maybe long before, and is at
    risk from when the scrub found it: the write that moved it (``updated_at``,
    ``idx_mdr_unsafe_found``); so is a ``hash_mismatch`` row upstream wrote, from the write
    that gave it that status."""
    keys = sorted(
        {
            (r.gateway_id, r.agent_id, r.status)
            for r in counts
            if r.status in AT_RISK_STATUSES and r.count
        }
    )
    parts = [_since_probe(status) for _gateway, _agent, status in keys]
    params = [
        p for gateway, agent, status in keys for p in (gateway, agent, agent, status, gateway)
    ]
    return _probe(parts, params)


def _since_probe(status: str) -> str:
    if status in SCRUB_VERDICT_STATUSES:
        return (
            f"SELECT %s, %s, (SELECT MIN(updated_at) FROM {T} WHERE {_SCRUB_VERDICT_CONDITION} "
            "AND agent_id = %s AND status = %s AND gateway_id = %s)"
        )
    return (
        f"SELECT %s, %s, (SELECT MIN(created_at) FROM {T} "
        "WHERE agent_id = %s AND status = %s AND gateway_id = %s)"
    )


def agent_signals(
    counts: list[CountRow] | None = None,
    now: int | None = None,
    states: Verdicts | None = None,
) -> dict[Key, AgentSignals]:
    """Every (gateway, agent) of the counts with its backlog, memory at risk and their ages,
    its one state and the heuristic's finding (``states``: ``health.verdicts(counts)``, read
    here when None)."""
    now = timeutil.now_ms() if now is None else now
    counts = receipt_counts() if counts is None else counts
    states = verdicts(counts) if states is None else states
    agents: dict[Key, AgentSignals] = {}

    def entry(key: Key) -> AgentSignals:
        if key not in agents:
            agents[key] = AgentSignals(agent=key[1], gateway=key[0])
        return agents[key]

    for row in counts:
        signals = entry((row.gateway_id, row.agent_id))
        if row.status in REPAIR_QUEUE_STATUSES:
            signals.backlog += row.count
    for key, n in at_risk_by_gateway_agent(counts).items():  # the one definition of at risk
        entry(key).at_risk = n
    for key, due_since in oldest_due_repairs(now, counts).items():
        entry(key).oldest_due_repair_age_s = max(0, now - due_since) / 1000
    for key, oldest in oldest_at_risk(counts).items():
        entry(key).oldest_at_risk_age_s = max(0, now - oldest) / 1000
    for key, state in states.states.items():
        entry(key).state = state
    for key, found in states.findings.items():
        signals = entry(key)
        signals.hash_mismatches = found
        if found.oldest_created_at is not None:
            signals.oldest_hash_mismatch_age_s = max(0, now - found.oldest_created_at) / 1000
    return agents
