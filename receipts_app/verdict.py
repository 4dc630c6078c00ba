"""One state per (gateway, agent), in one set of words: the verdict every surface shows.

The overview's agent cards, the fleet rows, the agent page, the gateway-link panel,
``/metrics`` and the alerts all say the state of an agent's memory through this module, so
no page can say "ok" beside a count at risk. The states come from the named status groups
(``statuses.AT_RISK_STATUSES``, ``statuses.REPAIR_QUEUE_STATUSES``), never from a list of
its own: a status added to a group changes every surface at once. Every surface reads them
through ``receipts_app.health.verdicts``, which also feeds in what health's hash-mismatch
heuristic found (this module reads no rows), so no surface can leave the heuristic out.

- ``at_risk``: receipts at risk (``AT_RISK_STATUSES``: failures waiting for an operator, a
  repair given up included, and requeued checkpoints until recovered), or a hash mismatch
  health's text heuristic found in the agent's window (``health.hash_mismatches``);
- ``repairing``: nothing at risk, but repairs queued (``REPAIR_QUEUE_STATUSES``): the worker
  will take them by itself;
- ``ok``: neither.

A gateway's own answer (``doctor.memory.status``) is put into the same words
(:func:`gateway_state`), so the link panel can say whether the two sides agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from .statuses import AT_RISK_STATUSES, REPAIR_QUEUE_STATUSES


class State(StrEnum):
    AT_RISK = "at_risk"
    REPAIRING = "repairing"
    OK = "ok"
    # Only for a gateway's side: it has not answered (yet), so there is nothing to compare.
    UNKNOWN = "unknown"


# The words each state reads as, everywhere; the CSS class of its badge.
LABELS: dict[State, str] = {
    State.AT_RISK: "at risk",
    State.REPAIRING: "repairs queued",
    State.OK: "ok",
    State.UNKNOWN: "not read",
}
BADGES: dict[State, str] = {
    State.AT_RISK: "bad",
    State.REPAIRING: "sem-warning",
    State.OK: "ok",
    State.UNKNOWN: "",
}
# Worst first: a gateway's row in the fleet shows the worst state of its agents.
SEVERITY: tuple[State, ...] = (State.AT_RISK, State.REPAIRING, State.OK)


@dataclass(frozen=True)
class Verdict:
    state: State

    @property
    def label(self) -> str:
        return LABELS[self.state]

    @property
    def badge(self) -> str:
        return BADGES[self.state]

    def __str__(self) -> str:
        return self.label


def state_of(at_risk: int, repair_backlog: int, *, hash_mismatches: int = 0) -> State:
    """The state of one (gateway, agent) from its counts."""
    if at_risk or hash_mismatches:
        return State.AT_RISK
    if repair_backlog:
        return State.REPAIRING
    return State.OK


class _CountRow(Protocol):
    # ``receipts_app.counts.CountRow``'s fields (read-only here).
    @property
    def gateway_id(self) -> str: ...
    @property
    def agent_id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def count(self) -> int: ...


def states_by_gateway_agent(
    rows: Iterable[_CountRow], hash_mismatches: Mapping[tuple[str, str], int]
) -> dict[tuple[str, str], State]:
    """The state of every (gateway, agent) with rows, from the counts table's rows
    (``receipts_app.counts``) and the heuristic's count per (gateway, agent) (required, so no
    caller forgets it; ``receipts_app.health.verdicts`` reads both for every surface)."""
    at_risk: dict[tuple[str, str], int] = {}
    backlog: dict[tuple[str, str], int] = {}
    for key in hash_mismatches:
        at_risk.setdefault(key, 0)
        backlog.setdefault(key, 0)
    for row in rows:
        key = (row.gateway_id, row.agent_id)
        at_risk.setdefault(key, 0)
        backlog.setdefault(key, 0)
        if row.status in AT_RISK_STATUSES:
            at_risk[key] += row.count
        if row.status in REPAIR_QUEUE_STATUSES:
            backlog[key] += row.count
    return {
        key: state_of(at_risk[key], backlog[key], hash_mismatches=hash_mismatches.get(key, 0))
        for key in at_risk
    }


def worst(states: Iterable[State]) -> State:
    """The worst of ``states`` (``ok`` for none)."""
    present = set(states)
    return next((s for s in SEVERITY if s in present), State.OK)


def gateway_state(
    *,
    memory_safety: str,
    repair_backlog: int,
    pending_repairs: int | None = None,
    repair_failures: int = 0,
) -> State:
    """A gateway's own answer in the same words: its memory safety not ``ok`` or a repair
    that failed is ``at_risk``; a backlog or pending repair is ``repairing``."""
    if memory_safety != "ok" or repair_failures:
        return State.AT_RISK
    if repair_backlog or pending_repairs:
        return State.REPAIRING
    return State.OK
