"""What the pages show of the gateway link: the stored readings beside our own numbers and
the gap between them. Reads the database only; no page render ever connects to a gateway.

One row per (linked gateway, agent), with two facts kept apart:

- the **link**: whether the last reading reached the gateway (``reachability``: reachable,
  unreachable, refused by settings, ...); viewers see only that word, operators and admins
  also the connection's own message;
- the **verdicts**: what the gateway itself last said about the agent's memory and what this
  console says of it (``receipts_app.health.verdicts``, the state every surface shows, the
  hash-mismatch heuristic included), both in the one set of words (``receipts_app.verdict``), and the gap
  (``receipts_app.mirror.gap``) with the receipts-list filter behind each number.

The two sides are "in step" only when this reading answered and both say the same state
with no gap; a side that was not read is "not compared", never "in step".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opensquilla_site.timeutil import duration_text, now_ms
from receipts_app import health
from receipts_app.counts import CountRow
from receipts_app.mirror.gap import gap_counts
from receipts_app.selectors import ReceiptFilter, filter_receipts
from receipts_app.statuses import (
    ACKNOWLEDGED,
    AT_RISK_STATUSES,
    CHECKPOINT_RECOVERED,
    CHECKPOINT_SUPERSEDED,
    REPAIR_DONE,
    REPAIR_QUEUE_STATUSES,
)
from receipts_app.verdict import LABELS, State, Verdict
from sessions_app.gateways import gateway_scope

from ..models import GatewayLink, GatewayMemoryVerdict
from .capabilities import unanswered_methods
from .client import REPAIR_RUN
from .states import STATE_MESSAGES, LinkState, reachability

IN_STEP = "in_step"
DIFFER = "differ"
NOT_COMPARED = "not_compared"
AGREEMENT_LABELS = {IN_STEP: "in step", DIFFER: "differ", NOT_COMPARED: "not compared"}

# How our status of a gap row reads in the sentence "here: 2 recovered by an operator".
_HERE_WORDS = {
    CHECKPOINT_RECOVERED: "recovered by an operator",
    ACKNOWLEDGED: "acknowledged by an operator",
    CHECKPOINT_SUPERSEDED: "superseded",
    REPAIR_DONE: "repaired here",
}


@dataclass
class GapView:
    total: int = 0
    gateway_side: int = 0  # open at the gateway, resolved here
    here_side: int = 0  # open here, closed at the gateway
    by_status: dict[str, int] = field(default_factory=dict)
    filter: dict[str, Any] = field(default_factory=dict)
    gateway_filter: dict[str, Any] = field(default_factory=dict)
    here_filter: dict[str, Any] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return "gap" if self.total else "in_step"


@dataclass
class AgentLinkView:
    gateway: str
    agent_id: str
    link: GatewayLink
    verdict: GatewayMemoryVerdict
    at_risk_here: int
    backlog_here: int
    at_risk_filter: dict[str, Any]
    gap: GapView
    now: int
    # This console's state of the agent (``health.verdicts``) and the heuristic's finding.
    here_state: State
    hash_mismatches: health.HashMismatches = field(default_factory=health.HashMismatches)

    @property
    def reachability(self) -> str:
        """The link's fact: whether the last reading reached the gateway (no details)."""
        return reachability(self.link.state)

    @property
    def here(self) -> Verdict:
        return Verdict(self.here_state)

    @property
    def theirs(self) -> Verdict:
        """The gateway's own verdict, from its last answer (``unknown`` before one)."""
        return Verdict(self.verdict.own_state)

    @property
    def read_now(self) -> bool:
        """The last reading got this agent's answer (not an older answer kept with its age)."""
        return self.verdict.state == LinkState.OK and self.verdict.answered_at is not None

    @property
    def agreement(self) -> str:
        """``in_step`` only when both sides were read and agree; ``differ``; ``not_compared``."""
        if not self.read_now or self.theirs.state == State.UNKNOWN:
            return NOT_COMPARED
        if self.theirs.state == self.here.state and not self.gap.total:
            return IN_STEP
        return DIFFER

    @property
    def agreement_label(self) -> str:
        return AGREEMENT_LABELS[self.agreement]

    @property
    def state(self) -> str:
        """The row's word (its CSS class): the agreement."""
        return self.agreement

    @property
    def answered(self) -> bool:
        return self.verdict.answered_at is not None

    @property
    def age(self) -> str:
        return duration_text(max(0, self.now - self.verdict.read_at) / 1000)

    @property
    def answer_age(self) -> str:
        if self.verdict.answered_at is None:
            return ""
        return duration_text(max(0, self.now - self.verdict.answered_at) / 1000)

    @property
    def unanswered(self) -> tuple[str, ...]:
        """The RPCs the gateway's version no longer answers (``capabilities``)."""
        gateway = self.link.gateway
        return unanswered_methods(
            self.link.server_version, ledger_retired=gateway.ledger_retired_at is not None
        )

    @property
    def can_run_repairs(self) -> bool:
        """The repair button's condition: the link allows a run and the RPC still exists."""
        return self.link.can_run_repairs and REPAIR_RUN not in self.unanswered

    @property
    def state_message(self) -> str:
        return self.verdict.message or STATE_MESSAGES.get(LinkState(self.verdict.state), "")

    @property
    def gateway_says(self) -> str:
        v = self.verdict
        if v.answered_at is None:
            return "gateway says: nothing yet"
        parts = [v.memory_safety or "unknown"]
        parts.append(_plural(v.repair_backlog_count or 0, "repair", "queued"))
        if v.pending_repair_count is not None:
            parts.append(_plural(v.pending_repair_count, "pending repair"))
        if v.repair_failures:
            parts.append(_plural(len(v.repair_failures), "repair failure"))
        if v.raw_fallback_count:
            parts.append(_plural(v.raw_fallback_count, "raw fallback"))
        return "gateway says: " + ", ".join(parts)

    @property
    def here_says(self) -> str:
        parts = []
        for status, n in sorted(self.gap.by_status.items(), key=lambda kv: (-kv[1], kv[0])):
            parts.append(f"{n} {_HERE_WORDS.get(status, f'now {status}')}")
        parts.append(f"{self.at_risk_here} {LABELS[State.AT_RISK]}")
        # The heuristic's rows are a link of their own in the panel (``hash_mismatches``).
        return "here: " + ", ".join(parts)


def _plural(n: int, noun: str, suffix: str = "") -> str:
    text = f"{n} {noun}{'' if n == 1 else 's'}"
    return f"{text} {suffix}" if suffix else text


def agent_link_views(
    agent_id: str | None = None,
    counts: list[CountRow] | None = None,
    states: health.Verdicts | None = None,
) -> list[AgentLinkView]:
    """Every linked gateway's stored verdict per agent (one agent's with ``agent_id``), in the
    gateway an edge chose or all of them: the verdicts with their links (one query), then,
    when there are any, our counts and states (unless the caller read them: ``counts``,
    ``states``) and the gap."""
    scope = gateway_scope()
    # The link and its gateway (what version it runs, whether its ledger is retired): one query.
    verdicts = GatewayMemoryVerdict.objects.select_related("gateway__gateway")
    if scope is not None:
        verdicts = verdicts.filter(gateway_id=scope)
    if agent_id is not None:
        verdicts = verdicts.filter(agent_id=agent_id)
    rows = list(verdicts.order_by("gateway_id", "agent_id"))
    if not rows:
        return []
    if counts is None:
        counts, states = health.counts_and_verdicts()
    elif states is None:
        states = health.verdicts(counts)
    gap_base = ReceiptFilter(gap="any", gateway=scope, agent=agent_id)
    gaps = gap_counts(filter_receipts(gap_base))
    now = now_ms()
    out = []
    for v in rows:
        link = v.gateway
        mine = [r for r in counts if r.gateway_id == v.gateway_id and r.agent_id == v.agent_id]
        g = gaps.get((v.gateway_id, v.agent_id), {})
        base = ReceiptFilter(gateway=v.gateway_id, agent=v.agent_id or None)
        out.append(
            AgentLinkView(
                gateway=v.gateway_id,
                agent_id=v.agent_id,
                link=link,
                verdict=v,
                at_risk_here=sum(r.count for r in mine if r.status in AT_RISK_STATUSES),
                backlog_here=sum(r.count for r in mine if r.status in REPAIR_QUEUE_STATUSES),
                at_risk_filter=base.with_statuses(*AT_RISK_STATUSES).to_params(),
                gap=GapView(
                    total=g.get("total", 0),
                    gateway_side=g.get("gateway", 0),
                    here_side=g.get("here", 0),
                    by_status=g.get("by_status", {}),
                    filter={**base.to_params(), "gap": "true"},
                    gateway_filter={**base.to_params(), "gap": "gateway"},
                    here_filter={**base.to_params(), "gap": "here"},
                ),
                now=now,
                here_state=states.state(v.gateway_id, v.agent_id),
                hash_mismatches=states.found(v.gateway_id, v.agent_id),
            )
        )
    return out
