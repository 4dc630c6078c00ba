"""Which subjects each alert rule finds firing right now.

A ``Snapshot`` is read once per evaluation (counts table, two grouped queries, heartbeats,
mirror state) and every rule is judged against it, so evaluation costs the same whatever the
number of rules.

Every ledger and mirror subject belongs to one gateway: an agent's subject is
``<gateway>/<agent>`` (the same agent name on two gateways is two subjects, two incidents),
a mirror's ``<gateway>/<source>``, and its summary names the gateway. A rule scoped to a
gateway (``AlertRule.gateway``) judges only that gateway's rows and mirrors; an unscoped one
every gateway's, each firing naming its own. Workers and beat serve every gateway: their
subjects have none.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from opensquilla_site import timeutil
from receipts_app.counts import CountRow
from receipts_app.health import counts_and_verdicts
from receipts_app.mirror.gap import gap_counts
from receipts_app.selectors import ReceiptFilter, filter_receipts
from receipts_app.statuses import FAILURE_STATUSES, SCRUB_VERDICT_STATUSES
from receipts_app.verdict import LABELS, State

from ..heartbeats import HeartbeatView, heartbeats, latest_seen
from ..ledger_state import AgentSignals, agent_signals
from ..mirror import MirrorView, mirror_views
from ..models import AlertRule, GatewayLink


@dataclass(frozen=True)
class Firing:
    value: float
    summary: str
    gateway: str = ""  # the subject's gateway ("" for workers and beat)


@dataclass
class Snapshot:
    now: int
    counts: list[CountRow]
    agents: dict[tuple[str, str], AgentSignals]
    beats: list[HeartbeatView] = field(default_factory=list)
    mirrors: list[MirrorView] = field(default_factory=list)

    @classmethod
    def read(cls, now: int | None = None) -> Snapshot:
        now = timeutil.now_ms() if now is None else now
        # The counts and each agent's one state (health.verdicts), in one read.
        counts, states = counts_and_verdicts()
        return cls(
            now=now,
            counts=counts,
            agents=agent_signals(counts, now, states),
            beats=heartbeats(now),
            mirrors=mirror_views(),
        )


def subject_of(gateway: str, name: str) -> str:
    """The incident subject of an agent or mirror source of ``gateway``."""
    return f"{gateway}/{name}"


def _in_gateway(rule: AlertRule, gateway: str) -> bool:
    return rule.gateway_id is None or gateway == rule.gateway_id


def _agents(rule: AlertRule, snap: Snapshot) -> list[AgentSignals]:
    return [
        s
        for (gateway, agent), s in sorted(snap.agents.items())
        if _in_gateway(rule, gateway) and (not rule.agent or agent == rule.agent)
    ]


def _who(s: AgentSignals) -> str:
    return f"agent {s.agent or '(none)'} on gateway {s.gateway}"


def _failures(rule: AlertRule, snap: Snapshot) -> dict[str, Firing]:
    per_agent: dict[tuple[str, str], int] = {}
    for row in snap.counts:
        if row.status not in FAILURE_STATUSES or not _in_gateway(rule, row.gateway_id):
            continue
        if (rule.agent and row.agent_id != rule.agent) or (rule.scope and row.scope != rule.scope):
            continue
        key = (row.gateway_id, row.agent_id)
        per_agent[key] = per_agent.get(key, 0) + row.count
    where = f" in scope {rule.scope}" if rule.scope else ""
    return {
        subject_of(gateway, agent): Firing(
            n,
            f"{n} receipts of agent {agent or '(none)'} on gateway {gateway}{where} "
            "are in a failure status",
            gateway,
        )
        for (gateway, agent), n in sorted(per_agent.items())
        if n >= rule.threshold
    }


def _unsafe_checkpoints(rule: AlertRule, snap: Snapshot) -> dict[str, Firing]:
    """Subject ``gateway/agent``: saved checkpoints the scrub found missing or damaged
    (``checkpoint_missing``, ``hash_mismatch`` of scope checkpoint), when at least the
    threshold (0 fires on any, like 1). The receipts list
    ``?gateway=G&agent=A&scope=checkpoint&status=checkpoint_missing,hash_mismatch`` shows them."""
    per_agent: dict[tuple[str, str], dict[str, int]] = {}
    for row in snap.counts:
        if row.scope != "checkpoint" or row.status not in SCRUB_VERDICT_STATUSES:
            continue
        if not _in_gateway(rule, row.gateway_id) or (rule.agent and row.agent_id != rule.agent):
            continue
        per = per_agent.setdefault((row.gateway_id, row.agent_id), {})
        per[row.status] = per.get(row.status, 0) + row.count
    out: dict[str, Firing] = {}
    for (gateway, agent), per in sorted(per_agent.items()):
        n = sum(per.values())
        if n and n >= rule.threshold:
            parts = ", ".join(f"{count} {status}" for status, count in sorted(per.items()))
            out[subject_of(gateway, agent)] = Firing(
                n,
                f"{n} saved checkpoint{'s' if n != 1 else ''} of agent {agent or '(none)'} on "
                f"gateway {gateway} {'are' if n != 1 else 'is'} missing or damaged on disk "
                f"({parts})",
                gateway,
            )
    return out


def _at_risk_age(rule: AlertRule, snap: Snapshot) -> dict[str, Firing]:
    """Subject ``gateway/agent``: its state (``health.verdicts``, as every page shows it) is at
    risk, by status or by health's hash-mismatch heuristic, for longer than the threshold."""
    out: dict[str, Firing] = {}
    for s in _agents(rule, snap):
        age = s.at_risk_for_s
        if age is None or age <= rule.threshold:
            continue
        found = s.hash_mismatches.count
        heuristic = f", {found} hash mismatch{'es' if found != 1 else ''}" if found else ""
        out[subject_of(s.gateway, s.agent)] = Firing(
            age,
            # The verdict's words (receipts_app.verdict), as every page says them.
            f"memory of {_who(s)}: {LABELS[State.AT_RISK]} for "
            f"{age:.0f} s ({s.at_risk} {LABELS[State.AT_RISK]}{heuristic})",
            s.gateway,
        )
    return out


def _silence(kind: str, rule: AlertRule, snap: Snapshot) -> dict[str, Firing]:
    seen = latest_seen(kind, snap.beats)
    label = "worker" if kind == "worker" else "beat"
    if seen is None:
        return {label: Firing(float("inf"), f"no running {label} has ever reported a heartbeat")}
    silent_s = max(0, snap.now - seen) / 1000
    if silent_s <= rule.threshold:
        return {}
    return {label: Firing(silent_s, f"no {label} heartbeat for {silent_s:.0f} s")}


def firing_subjects(rule: AlertRule, snap: Snapshot) -> dict[str, Firing]:
    """Subject → what fires, for every subject over the rule's threshold now."""
    c = rule.condition
    if c == AlertRule.FAILURE_STATUS:
        return _failures(rule, snap)
    if c == AlertRule.BACKLOG_COUNT:
        return {
            subject_of(s.gateway, s.agent): Firing(
                s.backlog, f"repair backlog of {_who(s)} is {s.backlog}", s.gateway
            )
            for s in _agents(rule, snap)
            if s.backlog > rule.threshold
        }
    if c == AlertRule.BACKLOG_AGE:
        return {
            subject_of(s.gateway, s.agent): Firing(
                s.oldest_due_repair_age_s,
                f"oldest due repair of {_who(s)} has waited {s.oldest_due_repair_age_s:.0f} s",
                s.gateway,
            )
            for s in _agents(rule, snap)
            if s.oldest_due_repair_age_s is not None and s.oldest_due_repair_age_s > rule.threshold
        }
    if c == AlertRule.AT_RISK_AGE:
        return _at_risk_age(rule, snap)
    if c == AlertRule.MIRROR_LAG:
        return {
            subject_of(m.gateway, m.source): Firing(
                m.lag_seconds,
                f"mirror of {m.source} (gateway {m.gateway}) lags {m.lag_seconds:.0f} s",
                m.gateway,
            )
            for m in snap.mirrors
            if m.lag_seconds is not None
            and m.lag_seconds > rule.threshold
            and _in_gateway(rule, m.gateway)
        }
    if c == AlertRule.WORKER_SILENT:
        return _silence("worker", rule, snap)
    if c == AlertRule.BEAT_SILENT:
        return _silence("beat", rule, snap)
    if c == AlertRule.GATEWAY_MEMORY_GAP:
        return _gateway_gap(rule)
    if c == AlertRule.GATEWAY_LINK:
        return _gateway_link(rule, snap)
    if c == AlertRule.CHECKPOINT_UNSAFE:
        return _unsafe_checkpoints(rule, snap)
    return {}


def _gateway_gap(rule: AlertRule) -> dict[str, Firing]:
    """Subject ``gateway/agent``: the gap's count (receipts_app.mirror.gap), when at least the
    threshold (a threshold of 0 fires on any gap, like 1)."""
    gaps = gap_counts(filter_receipts(ReceiptFilter(gap="any", agent=rule.agent or None)))
    out: dict[str, Firing] = {}
    for (gateway, agent), g in sorted(gaps.items()):
        n = g["total"]
        if n and n >= rule.threshold:
            out[f"{gateway}/{agent}"] = Firing(
                n,
                f"gateway {gateway} and this console disagree on {n} receipt"
                f"{'s' if n != 1 else ''} of agent {agent or '(none)'} "
                f"({g['gateway']} resolved here but open at the gateway, {g['here']} the reverse)",
            )
    return out


def _gateway_link(rule: AlertRule, snap: Snapshot) -> dict[str, Firing]:
    """Subject: the gateway, while its link has not been ok for longer than the threshold."""
    out: dict[str, Firing] = {}
    for link in GatewayLink.objects.exclude(state="ok").exclude(failing_since__isnull=True):
        failing_s = max(0, snap.now - int(link.failing_since or snap.now)) / 1000
        if failing_s > rule.threshold:
            out[link.gateway_id] = Firing(
                failing_s,
                f"gateway link {link.gateway_id} is {link.state} for {failing_s:.0f} s: "
                f"{link.message}",
            )
    return out
