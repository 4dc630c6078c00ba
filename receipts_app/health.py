"""Memory health derived from the ledger (docs/UPSTREAM.md#health), per gateway and agent:
upstream's two signals and one of ours.

Every count comes with the filter (``ReceiptFilter.to_params()``) that lists exactly the rows
counted, and is counted through that filter (``selectors.filter_receipts``), so a count and
the link a page builds from its filter cannot disagree.

- ``memorySafety``: "error" while content is not safe anywhere: rows in
  ``MEMORY_SAFETY_ERROR_STATUSES`` (a requeued checkpoint stays one until the worker recovers
  it). Unlike upstream, such a row does not age out of a 1000-row window: it stays at risk
  until it is recovered, superseded or acknowledged. Upstream's text heuristic (a hash
  mismatch named in a row's status or reason) is kept over the 1000 most recent rows, as
  upstream bounds it; rows an operator resolved, and rows retired by their gateway's upgrade,
  never count (``statuses.CLOSED_STATUSES``, docs/STATUSES.md).
- ``semanticMemory``: the repair backlog (``REPAIR_QUEUE_STATUSES``, due or not); the status
  rule is upstream's.
- ``atRisk``: memory at risk, the product's one definition (``statuses.AT_RISK_STATUSES``:
  failures waiting for an operator, and requeued checkpoints until recovered); the overview
  card, the failure groups, time at risk, ``/metrics`` and alerts count the same rows
  (:func:`at_risk_by_gateway_agent`).
- ``terminalRepairs``: repairs whose automatic budget is spent (``repair_failed``,
  ``repair_abandoned``). Upstream's health counts them nowhere; they wait for an operator.

The one state of each (gateway, agent) (``receipts_app.verdict``) that every surface shows
is :func:`verdicts`: the counts with the heuristic's findings (:func:`hash_mismatches`), so a
row the heuristic finds makes the card, the fleet, ``/metrics`` and the alert say "at risk"
together.

Counts are exact and come from the counts table (``receipts_app.counts``); the rest (the
oldest queued row, the at-risk samples, the hash-mismatch window) is one statement for every
agent of ``health_by_agent`` together, so the overview's query count does not grow with agents.

The same agent name on two gateways is two agents (session keys overlap between gateways by
construction): :func:`health_by_agent` gives one entry per (gateway, agent), each naming its
``gateway`` and counting and linking to that gateway's rows only. Health covers every gateway,
or the one an edge chose (``sessions_app.gateways.gateway_scope``, the API's and the console's
``?gateway=``); :func:`memory_health` of an agent sums its rows over the gateways in scope.
"""

# Every interpolated name is a table or status constant; values are bound parameters.
# ruff: noqa: S608

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connection

from opensquilla_site import timeutil
from sessions_app.gateways import gateway_scope
from sessions_app.keys import agent_prefix, normalize_agent_id

from .counts import CountRow, receipt_counts, receipt_counts_and
from .ledger.triggers import T
from .selectors import ReceiptFilter
from .statuses import (
    AT_RISK_STATUSES,
    CHECKPOINT_MISSING,
    CLOSED_STATUSES,
    MEMORY_SAFETY_ERROR_STATUSES,
    REPAIR_QUEUE_STATUSES,
    TERMINAL_REPAIR_STATUSES,
)
from .verdict import State, states_by_gateway_agent, worst

SAMPLE_LIMIT = 1000
SAMPLE_IDS = 5
BACKLOG_WARNING_COUNT = 10
BACKLOG_WARNING_AGE_MS = 24 * 60 * 60 * 1000
# Rows the hash-mismatch heuristic names at most (their ids are the finding's filter).
HASH_MISMATCH_ID_LIMIT = 100


def _in(statuses: Sequence[str]) -> str:
    return "(" + ", ".join(f"'{s}'" for s in statuses) + ")"


def hash_mismatch_predicate(percent: str = "%%") -> str:
    """Upstream's text heuristic in SQL: a hash mismatch named in the status or reason, closed
    rows (resolved, or retired by the gateway's upgrade: ``CLOSED_STATUSES``) and the error
    statuses (counted on their own) excluded.

    It is also the WHERE of the partial index ``idx_mdr_hash_mismatch`` (migration 0023, which
    froze this text with ``percent="%"``; 0012 froze the one before ``retired_upstream``):
    both planners use a partial index only when the query repeats its condition term for term,
    so a change here needs a migration that re-creates the index (``test_health`` checks the
    two still agree).
    """
    text = "LOWER(status || ' ' || COALESCE(reason, ''))"
    # ``checkpoint_missing`` (the scrub's, after 0012) stays out of the frozen list: its reason
    # never names a hash mismatch, so the heuristic finds none of its rows either way.
    excluded = tuple(s for s in MEMORY_SAFETY_ERROR_STATUSES if s != CHECKPOINT_MISSING)
    return (
        f"status NOT IN {_in(CLOSED_STATUSES + excluded)} AND "
        f"({text} LIKE '{percent}hash!_mismatch{percent}' ESCAPE '!' "
        f"OR {text} LIKE '{percent}hash mismatch{percent}')"
    )


_HASH_MISMATCH_SQL = hash_mismatch_predicate()


# (gateway, agent) whose health is asked; None in either place: every gateway in scope
# (``gateway_scope()``) or every agent.
HealthKey = tuple[str | None, str | None]


def _gateway(gateway: str | None) -> str | None:
    """The gateway a key reads: its own, else the one an edge chose (None: every gateway)."""
    return gateway if gateway is not None else gateway_scope()


def _filter(key: HealthKey, statuses: tuple[str, ...]) -> ReceiptFilter:
    gateway, agent_id = key
    return ReceiptFilter(agent=agent_id or None, statuses=statuses, gateway=_gateway(gateway))


def _scope_sql(gateway: str | None) -> str:
    return "" if _gateway(gateway) is None else "gateway_id = %s AND "


def _scope_params(gateway: str | None) -> list[Any]:
    scope = _gateway(gateway)
    return [] if scope is None else [scope]


@dataclass
class _Sample:
    """What one agent's health reads from its rows (beyond the counts)."""

    checked: int | None = None  # None: not counted (the caller did not ask)
    mismatched: list[tuple[int, int, str]] = field(default_factory=list)
    at_risk: list[tuple[int, int, str]] = field(default_factory=list)
    oldest_queued: int | None = None


def _rows_of(rows: Sequence[CountRow], key: HealthKey) -> list[CountRow]:
    gateway, agent_id = _gateway(key[0]), key[1]
    return [
        r
        for r in rows
        if (agent_id is None or r.agent_id == agent_id)
        and (gateway is None or r.gateway_id == gateway)
    ]


def _by_status(rows: Sequence[CountRow], key: HealthKey, statuses: tuple[str, ...]) -> dict:
    out: dict[str, int] = {}
    for row in _rows_of(rows, key):
        if row.status in statuses:
            out[row.status] = out.get(row.status, 0) + row.count
    return {s: out[s] for s in statuses if out.get(s)}


def _window_sql(gateway: str | None, agent: str | None) -> str:
    """The agent's ``SAMPLE_LIMIT`` newest rows, in an order only its ``(agent_id, created_at,
    id)`` index gives, so the plan is a bounded backward index scan at any ledger size.

    Upstream's window is the newest rows under the literal ``agent:<id>:`` prefix. Of the rows
    with this ``agent_id`` only subagent keys (``subagent:agent:<id>:…``) lack that prefix, so
    they are left out here with a condition every planner rates as keeping nearly all rows; a
    prefix comparison in this place is rated as keeping 0.5 % of them, which made PostgreSQL
    sort the agent's whole range instead (6.9 s for the overview at 1M rows, bench/scale.py).
    ``_in_prefix`` still checks the literal prefix on the window's rows.
    """
    columns = "receipt_id, status, reason, created_at, id, session_key"
    scope = _scope_sql(gateway)
    if agent is None:
        return (
            f"SELECT {columns} FROM {T} WHERE {scope}1 = 1 "
            f"ORDER BY created_at DESC, id DESC LIMIT {SAMPLE_LIMIT}"
        )
    return (
        f"SELECT {columns} FROM {T} WHERE {scope}agent_id = %s "
        f"AND session_key NOT LIKE 'subagent:%%' "
        f"ORDER BY agent_id DESC, created_at DESC, id DESC LIMIT {SAMPLE_LIMIT}"
    )


def _window_params(gateway: str | None, agent: str | None) -> list[Any]:
    return [*_scope_params(gateway), *([] if agent is None else [agent])]


def match_probe() -> tuple[str, list[Any]]:
    """Every (gateway, agent) in the gateway scope with a row the heuristic matches, at any
    age: a read of the partial index ``idx_mdr_hash_mismatch``, which holds only such rows
    (the query repeats its condition, as both planners require to use it)."""
    scope = _gateway(None)
    where = "" if scope is None else "gateway_id = %s AND "
    # SQLite would rather walk an index that gives DISTINCT its order, past every row.
    forced = " INDEXED BY idx_mdr_hash_mismatch" if connection.vendor == "sqlite" else ""
    sql = (
        f"SELECT DISTINCT gateway_id, agent_id FROM {T}{forced} "  # noqa: S608
        f"WHERE {where}{_HASH_MISMATCH_SQL}"
    )
    return sql, [] if scope is None else [scope]


def _in_prefix(agent: str | None) -> str:
    return "" if agent is None else "SUBSTR(session_key, 1, %s) = %s AND "


def _prefix_params(agent: str | None) -> list[Any]:
    if agent is None:
        return []
    prefix = agent_prefix(agent)
    return [len(prefix), prefix]


def _read_samples(
    keys: Sequence[HealthKey],
    rows: Sequence[CountRow],
    *,
    count_checked: bool,
    findings: Mapping[Key, HashMismatches] | None = None,
) -> list[_Sample]:
    """For every (gateway, agent) (None: every gateway in scope, every agent):
    - the hash-mismatch window: of the agent's ``SAMPLE_LIMIT`` newest rows under its literal
      key prefix (as upstream reads them), which match and (``count_checked``) how many were
      checked; without the count, the window is read only when the agent has a match at all;
    - the first ``SAMPLE_IDS`` at-risk rows, when the counts say there are any;
    - the oldest queued ``created_at``: one index probe per (agent, queued status) with rows.

    One statement. Without the count it carries the match probe (``match_probe``) instead of
    the windows, and a second statement reads the windows of the keys it flags, if any.
    Gating each window inside the one statement made it one EXISTS per key, and PostgreSQL
    spent 0.1 s planning 40 of them (10 gateways × 4 agents) for a statement that ran in 16 ms.

    ``findings`` (without the count): what :func:`hash_mismatches` read already; a key's
    matches are then its (gateway, agent) windows' matches, and no window is read again.
    """
    samples = [_Sample() for _ in keys]
    if not keys:
        return samples
    every = range(len(keys))
    if findings is not None and not count_checked:
        _read(keys, rows, samples, windows=(), first=True, checked=False, probe=False)
        for key, sample in zip(keys, samples, strict=True):
            sample.mismatched = list(HashMismatches.merged(findings, *key).found)
        return samples
    flagged = _read(
        keys,
        rows,
        samples,
        windows=every if count_checked else (),
        first=True,
        checked=count_checked,
    )
    if flagged:
        marked = [i for i in every if _matches_any(keys[i], flagged)]
        _read(keys, rows, samples, windows=marked, first=False, checked=False)
    return samples


def _read(
    keys: Sequence[HealthKey],
    rows: Sequence[CountRow],
    samples: list[_Sample],
    *,
    windows: Sequence[int],
    first: bool,
    checked: bool,
    probe: bool = True,
) -> set[tuple[str, str]]:
    """One statement: the windows of ``windows`` (and their counts when ``checked``); when
    ``first``, every key's at-risk and queue probes, and (no count asked, ``probe``) the match
    probe.
    Fills ``samples``; returns the (gateway, agent) pairs the match probe flagged."""
    ctes: list[str] = []
    cte_params: list[Any] = []  # the WITH clause comes first in the statement
    parts: list[str] = []
    params: list[Any] = []
    for index in windows:
        gateway, agent = keys[index]
        ctes.append(f"w{index} AS ({_window_sql(gateway, agent)})")
        cte_params += _window_params(gateway, agent)
        parts.append(
            f"SELECT 'm' AS kind, %s AS idx, receipt_id, created_at, id "
            f"FROM w{index} WHERE {_in_prefix(agent)}{_HASH_MISMATCH_SQL}"
        )
        params += [index, *_prefix_params(agent)]
        if checked:
            parts.append(
                "SELECT 'n', %s, NULL, "
                f"(SELECT COUNT(*) FROM w{index} WHERE {_in_prefix(agent)}1 = 1), "
                "CAST(NULL AS BIGINT)"
            )
            params += [index, *_prefix_params(agent)]
    if first:
        if not checked and probe:
            probe_sql, probe_params = match_probe()
            # kind "g:<gateway>", the agent where the receipt id goes.
            parts.append(
                f"SELECT 'g:' || gateway_id, NULL, agent_id, NULL, NULL FROM ({probe_sql}) AS g"
            )
            params += probe_params
        for index, key in enumerate(keys):
            _probe_parts(index, key, rows, parts, params)
    if not parts:
        return set()
    flagged: set[tuple[str, str]] = set()
    with_clause = f"WITH {', '.join(ctes)} " if ctes else ""
    with connection.cursor() as cur:
        cur.execute(with_clause + " UNION ALL ".join(parts), [*cte_params, *params])
        for kind, idx, receipt_id, number, row_id in cur.fetchall():
            if kind.startswith("g:"):
                flagged.add((kind[2:], str(receipt_id)))
                continue
            sample = samples[int(idx)]
            if kind == "m":
                sample.mismatched.append((int(number), int(row_id), receipt_id))
            elif kind == "s":
                sample.at_risk.append((int(number), int(row_id), receipt_id))
            elif kind == "n":
                sample.checked = int(number)
            elif number is not None:
                current = sample.oldest_queued
                sample.oldest_queued = number if current is None else min(current, number)
    return flagged


def _probe_parts(
    index: int, key: HealthKey, rows: Sequence[CountRow], parts: list[str], params: list[Any]
) -> None:
    """The key's at-risk sample and oldest-queued probes, for the statements the counts call for."""
    gateway, agent = key
    mine = _rows_of(rows, key)
    at_risk = sorted({r.status for r in mine if r.status in MEMORY_SAFETY_ERROR_STATUSES})
    if at_risk:
        # The oldest few of each at-risk status the counts say it has, then the oldest few of
        # those: each probe walks an index in order (agent, status, created_at, or status,
        # created_at, id). One IN over the statuses walked the created_at index instead, past
        # every other row (4 ms a key at 5M receipts).
        agent_where = "" if agent is None else "agent_id = %s AND "
        # Each probe in its own subquery: SQLite takes no parenthesised compound member.
        probes = " UNION ALL ".join(
            f"SELECT * FROM (SELECT receipt_id, created_at, id FROM {T} WHERE "
            f"{_scope_sql(gateway)}{agent_where}status = %s "
            f"ORDER BY created_at, id LIMIT {SAMPLE_IDS}) AS p{index}_{n}"
            for n, _ in enumerate(at_risk)
        )
        parts.append(
            "SELECT 's', %s, receipt_id, created_at, id FROM ("
            f"SELECT receipt_id, created_at, id FROM ({probes}) AS p{index} "
            f"ORDER BY created_at, id LIMIT {SAMPLE_IDS}) AS s{index}"
        )
        params.append(index)
        for status in at_risk:
            params += [*_scope_params(gateway), *([] if agent is None else [agent]), status]
    # One probe per (gateway, agent, queued status) the counts say has rows.
    for gateway_id, agent_id, status in sorted(
        {(r.gateway_id, r.agent_id, r.status) for r in mine if r.status in REPAIR_QUEUE_STATUSES}
    ):
        parts.append(
            "SELECT 'q', %s, NULL, "
            f"(SELECT MIN(created_at) FROM {T} WHERE gateway_id = %s AND agent_id = %s "
            "AND status = %s), CAST(NULL AS BIGINT)"
        )
        params += [index, gateway_id, agent_id, status]


def _matches_any(key: HealthKey, flagged: set[tuple[str, str]]) -> bool:
    gateway, agent = key
    return any(
        (gateway is None or g == gateway) and (agent is None or a == agent) for g, a in flagged
    )


# One agent on one gateway: the unit of every verdict (``receipts_app.verdict``).
Key = tuple[str, str]


@dataclass(frozen=True)
class HashMismatches:
    """What the text heuristic found: the matching rows of the windows read, as
    ``(created_at, id, receipt_id)``, newest first. A card, a fleet row and the agent page
    name the newest ``HASH_MISMATCH_ID_LIMIT`` of them by id (their ``filter``) and count
    exactly those, so a count and its link cannot disagree."""

    found: tuple[tuple[int, int, str], ...] = ()

    @classmethod
    def of(cls, found: Iterable[tuple[int, int, str]]) -> HashMismatches:
        return cls(tuple(sorted(found, reverse=True)))

    @classmethod
    def merged(
        cls, findings: Mapping[Key, HashMismatches], gateway: str | None, agent: str | None
    ) -> HashMismatches:
        """The findings of every (gateway, agent) the key covers (None: every gateway in
        scope, every agent), as one."""
        gateway = _gateway(gateway)
        return cls.of(
            row
            for (g, a), finding in findings.items()
            if (gateway is None or g == gateway) and (agent is None or a == agent)
            for row in finding.found
        )

    @property
    def receipt_ids(self) -> tuple[str, ...]:
        return tuple(rid for *_order, rid in self.found[:HASH_MISMATCH_ID_LIMIT])

    @property
    def count(self) -> int:
        return len(self.receipt_ids)

    @property
    def oldest_created_at(self) -> int | None:
        return min((created for created, *_rest in self.found), default=None)

    @property
    def filter(self) -> dict[str, Any] | None:
        """Exactly the rows counted, by id: no filter parameter expresses the text heuristic."""
        ids = self.receipt_ids
        return ReceiptFilter(receipt_ids=ids).to_params() if ids else None


def hash_mismatches(flagged: Iterable[tuple[str, str]] | None = None) -> dict[Key, HashMismatches]:
    """The heuristic's findings for every (gateway, agent) in the gateway scope with any: the
    match probe (one read of the partial index, which holds only matching rows; ``flagged``:
    its rows, read already), then, only when it flags some, one statement reading the flagged
    keys' windows: the window an agent's card reads (``_window_sql``), so a key has a finding
    here iff its card shows a hash mismatch. Rows without an agent id have no card and are
    left out, as :func:`health_by_agent` leaves them out."""
    if flagged is None:
        sql, params = match_probe()
        with connection.cursor() as cur:
            cur.execute(sql, params)
            flagged = [(str(g), str(a)) for g, a in cur.fetchall()]
    keys: list[HealthKey] = sorted({(g, a) for g, a in flagged if a})
    if not keys:
        return {}
    samples = [_Sample() for _ in keys]
    _read(keys, (), samples, windows=range(len(keys)), first=False, checked=False)
    return {
        (str(key[0]), str(key[1])): HashMismatches.of(sample.mismatched)
        for key, sample in zip(keys, samples, strict=True)
        if sample.mismatched
    }


@dataclass(frozen=True)
class Verdicts:
    """The one state of every (gateway, agent) (``receipts_app.verdict``), and the heuristic's
    findings behind it."""

    states: dict[Key, State]
    findings: dict[Key, HashMismatches]

    def state(self, gateway: str | None, agent: str | None) -> State:
        """The worst state of the keys ``(gateway, agent)`` covers (None: every gateway in
        scope, every agent): a fleet row is its gateway's, the agent page its agent's."""
        gateway = _gateway(gateway)
        return worst(
            s
            for (g, a), s in self.states.items()
            if (gateway is None or g == gateway) and (agent is None or a == agent)
        )

    def found(self, gateway: str | None, agent: str | None) -> HashMismatches:
        return HashMismatches.merged(self.findings, gateway, agent)


def verdicts(
    rows: Sequence[CountRow] | None = None,
    findings: Mapping[Key, HashMismatches] | None = None,
) -> Verdicts:
    """THE state of every (gateway, agent) in scope: at risk by status (the counts) or by the
    heuristic (:func:`hash_mismatches`, read here unless the caller read it: ``findings``),
    repairs queued, or ok. The cards, the agent page, the fleet, the link panel, ``/metrics``
    and the alerts all read their state here, so none can say "ok" where another says "at
    risk". Costs the match probe, and one more statement only when it flags anything."""
    rows = receipt_counts() if rows is None else rows
    found = dict(hash_mismatches() if findings is None else findings)
    counted = {key: f.count for key, f in found.items()}
    return Verdicts(states_by_gateway_agent(rows, counted), found)


def counts_and_verdicts() -> tuple[list[CountRow], Verdicts]:
    """``receipt_counts()`` and :func:`verdicts` of them, the match probe read in the counts'
    statement: one query for both (two when the probe flags anything), for the readers that
    keep a query budget (the fleet, ``/metrics``, the alerts)."""
    rows, flagged = receipt_counts_and(match_probe())
    return rows, verdicts(rows, hash_mismatches(flagged))


def _memory_safety(key: HealthKey, rows: Sequence[CountRow], sample: _Sample) -> dict:
    at_risk = _filter(key, MEMORY_SAFETY_ERROR_STATUSES)
    by_status = _by_status(rows, key, MEMORY_SAFETY_ERROR_STATUSES)
    count = sum(by_status.values())
    samples = [rid for *_order, rid in sorted(sample.at_risk)][:SAMPLE_IDS] if count else []
    found = HashMismatches.of(sample.mismatched)
    return {
        "status": "error" if count or found.count else "ok",
        "errorCount": count,
        "errorStatuses": by_status,
        "sampleReceiptIds": (samples + list(found.receipt_ids))[:SAMPLE_IDS],
        "rowsChecked": sample.checked,  # None when the caller did not ask
        "filter": at_risk.to_params(),
        "hashMismatchCount": found.count,
        "hashMismatchFilter": found.filter,
    }


def _semantic_memory(
    key: HealthKey, rows: Sequence[CountRow], sample: _Sample, now: int
) -> dict[str, Any]:
    count = sum(_by_status(rows, key, REPAIR_QUEUE_STATUSES).values())
    oldest = sample.oldest_queued if count else None
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
        "filter": _filter(key, REPAIR_QUEUE_STATUSES).to_params(),
    }


def at_risk_by_gateway_agent(rows: Sequence[CountRow]) -> dict[tuple[str, str], int]:
    """Receipts at risk per (gateway, agent) (those with none left out): THE count of memory
    at risk. The same agent name on two gateways is two entries."""
    out: dict[tuple[str, str], int] = {}
    for row in rows:
        if row.status in AT_RISK_STATUSES and row.count:
            key = (row.gateway_id, row.agent_id)
            out[key] = out.get(key, 0) + row.count
    return out


def _at_risk(key: HealthKey, rows: Sequence[CountRow]) -> dict[str, Any]:
    count = sum(at_risk_by_gateway_agent(_rows_of(rows, key)).values())
    return {"count": count, "filter": _filter(key, AT_RISK_STATUSES).to_params()}


def _terminal_repairs(key: HealthKey, rows: Sequence[CountRow]) -> dict[str, Any]:
    return {
        "count": sum(_by_status(rows, key, TERMINAL_REPAIR_STATUSES).values()),
        "filter": _filter(key, TERMINAL_REPAIR_STATUSES).to_params(),
    }


def health_for(
    keys: Sequence[HealthKey],
    rows: Sequence[CountRow] | None = None,
    *,
    now: int,
    count_checked: bool = True,
    findings: Mapping[Key, HashMismatches] | None = None,
) -> list[dict[str, Any]]:
    """Health of each (gateway, agent) (None: every gateway in scope, every agent): the counts
    (skipped when ``rows`` is given) and one statement, whatever the number of keys.

    ``count_checked=False`` leaves ``rowsChecked`` None and, in exchange, reads an agent's
    window only when it has a heuristic match at all: the same findings for a page that does
    not show the count. With ``findings`` (``Verdicts.findings``, for a page that shows the
    verdict too) it reads no window: a key's matches are those of its (gateway, agent)
    windows, the ones its state counted."""
    rows = receipt_counts() if rows is None else rows
    samples = _read_samples(keys, rows, count_checked=count_checked, findings=findings)
    return _entries(keys, rows, samples, now)


def _entries(
    keys: Sequence[HealthKey], rows: Sequence[CountRow], samples: Sequence[_Sample], now: int
) -> list[dict[str, Any]]:
    return [
        {
            "agentId": key[1],
            # The gateway whose rows are counted (None: every gateway).
            "gateway": _gateway(key[0]),
            "memorySafety": _memory_safety(key, rows, sample),
            "semanticMemory": _semantic_memory(key, rows, sample, now),
            "terminalRepairs": _terminal_repairs(key, rows),
            "atRisk": _at_risk(key, rows),
        }
        for key, sample in zip(keys, samples, strict=True)
    ]


def memory_health(agent_id: str | None = None, *, now_ms: int | None = None) -> dict[str, Any]:
    """``{"agentId", "gateway", "memorySafety", "semanticMemory", "terminalRepairs",
    "atRisk"}`` of an agent (None: every agent) over the gateways in scope."""
    now = now_ms if now_ms is not None else timeutil.now_ms()
    agent = normalize_agent_id(agent_id) if agent_id else None
    return health_for([(None, agent)], now=now)[0]


def health_by_agent(
    rows: Sequence[CountRow] | None = None,
    *,
    now_ms: int | None = None,
    count_checked: bool = True,
    findings: Mapping[Key, HashMismatches] | None = None,
) -> list[dict[str, Any]]:
    """Health for every (gateway, agent) that has rows in the ledger (in the gateway scope),
    sorted by agent id, then gateway."""
    now = now_ms if now_ms is not None else timeutil.now_ms()
    rows = receipt_counts() if rows is None else rows
    return health_for(
        _agent_keys(rows), rows, now=now, count_checked=count_checked, findings=findings
    )


def _agent_keys(rows: Sequence[CountRow]) -> list[HealthKey]:
    return [(g, a) for a, g in sorted({(r.agent_id, r.gateway_id) for r in rows if r.agent_id})]


def cards(
    rows: Sequence[CountRow], *, now_ms: int | None = None
) -> tuple[list[dict[str, Any]], Verdicts]:
    """The overview's agent cards: :func:`health_by_agent` without the count of rows checked,
    and :func:`verdicts`, in health's statements alone (the overview keeps its query budget).
    The cards' keys are exactly the ones :func:`hash_mismatches` reads (every (gateway, agent)
    with an agent id, its window read when the match probe flags it), so what the cards'
    windows found is those findings, and the verdicts are built from them."""
    now = now_ms if now_ms is not None else timeutil.now_ms()
    keys = _agent_keys(rows)
    samples = _read_samples(keys, rows, count_checked=False)
    findings = {
        (str(key[0]), str(key[1])): HashMismatches.of(sample.mismatched)
        for key, sample in zip(keys, samples, strict=True)
        if sample.mismatched
    }
    return _entries(keys, rows, samples, now), verdicts(rows, findings)
