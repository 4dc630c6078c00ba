"""The Prometheus exposition of ``/metrics``, built fresh from shared state on each scrape.

Nothing is kept in process memory: every value is read from the database (counts table,
counters, task statistics, heartbeats) or the broker, so any gunicorn worker answers the same.
One scrape runs a fixed number of queries whatever the ledger's size (see docs/OPERATIONS.md).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from opensquilla_site import timeutil
from receipts_app.counts import CountRow
from receipts_app.health import Verdicts, counts_and_verdicts
from receipts_app.mirror.gap import gap_counts
from receipts_app.selectors import ReceiptFilter, filter_receipts
from receipts_app.statuses import KNOWN_SCOPES, KNOWN_STATUSES
from receipts_app.verdict import SEVERITY

from . import counters, heartbeats
from .gateway_link.states import LinkState
from .ledger_state import agent_signals
from .mirror import MirrorView, mirror_views
from .models import GatewayMemoryVerdict, TaskStat
from .queues import queue_depths

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


# The label a status or scope outside the known vocabulary is counted under: a row's status
# and scope are free text in the ledger (a PUT may write any), and one series per value would
# let a client grow the scrape without bound.
OTHER_LABEL = "other"


def _bounded_receipt_series(counts: list[CountRow]) -> dict[tuple[str, str, str, str], int]:
    """Receipt counts per (agent, scope, status, gateway), unknown scopes and statuses summed
    under ``other``."""
    series: dict[tuple[str, str, str, str], int] = defaultdict(int)
    for row in counts:
        scope = row.scope if row.scope in KNOWN_SCOPES else OTHER_LABEL
        status = row.status if row.status in KNOWN_STATUSES else OTHER_LABEL
        series[(row.agent_id, scope, status, row.gateway_id)] += row.count
    return series


def _ledger_metrics(now: int, counts: list[CountRow], states: Verdicts) -> Iterator[Metric]:
    receipts = GaugeMetricFamily(
        "opensquilla_receipts",
        "Receipts in the ledger per agent, scope, status and gateway.",
        labels=["agent", "scope", "status", "gateway"],
    )
    for series, count in _bounded_receipt_series(counts).items():
        receipts.add_metric(list(series), count)
    yield receipts

    # Every series with an agent label names its gateway too: the same agent name on two
    # gateways is two series (session keys, and so agent ids, overlap between gateways).
    signals = agent_signals(counts, now, states)
    labels = ["agent", "gateway"]
    backlog = GaugeMetricFamily(
        "opensquilla_repair_backlog",
        "Repairs queued (due or not) per agent and gateway.",
        labels=labels,
    )
    due_age = GaugeMetricFamily(
        "opensquilla_repair_oldest_due_age_seconds",
        "How long the oldest due repair of each agent and gateway has waited since it became due.",
        labels=labels,
    )
    at_risk = GaugeMetricFamily(
        "opensquilla_memory_at_risk",
        "Unresolved failures per agent and gateway: memory not safe anywhere until requeued or "
        "acknowledged.",
        labels=labels,
    )
    risk_age = GaugeMetricFamily(
        "opensquilla_memory_at_risk_oldest_age_seconds",
        "Age of the oldest unresolved failure per agent and gateway.",
        labels=labels,
    )
    mismatches = GaugeMetricFamily(
        "opensquilla_memory_hash_mismatches",
        "Rows health's hash-mismatch heuristic finds in each agent's 1000 newest on each "
        "gateway (status not an at-risk one, reason naming a hash mismatch; at most 100): "
        "the agent's state counts them as at risk.",
        labels=labels,
    )
    for (gateway, agent), s in sorted(signals.items()):
        values = [agent, gateway]
        backlog.add_metric(values, s.backlog)
        at_risk.add_metric(values, s.at_risk)
        mismatches.add_metric(values, s.hash_mismatches.count)
        if s.oldest_due_repair_age_s is not None:
            due_age.add_metric(values, s.oldest_due_repair_age_s)
        if s.oldest_at_risk_age_s is not None:
            risk_age.add_metric(values, s.oldest_at_risk_age_s)
    yield from (backlog, due_age, at_risk, risk_age, mismatches)

    # The one state every page shows for an agent (receipts_app.verdict), as 1 of a fixed set.
    state = GaugeMetricFamily(
        "opensquilla_memory_state",
        "1 for the state of each agent's memory on each gateway (at_risk, repairing, ok), as "
        "every console page shows it; else 0.",
        labels=["agent", "gateway", "state"],
    )
    for (gateway, agent), current in sorted(states.states.items()):
        for s_ in SEVERITY:
            state.add_metric([agent, gateway, s_.value], 1.0 if current == s_ else 0.0)
    yield state


def _counter_metrics() -> Iterator[Metric]:
    values = counters.read_counters()
    outcomes = CounterMetricFamily(
        "opensquilla_requeue_outcomes",
        "Requeue attempts by outcome (single requeues and plan batches).",
        labels=["outcome"],
    )
    for outcome, value in sorted(values.get(counters.REQUEUE_OUTCOMES, {}).items()):
        outcomes.add_metric([outcome], value)
    yield outcomes
    yield CounterMetricFamily(
        "opensquilla_plan_rows_processed",
        "Receipts processed by requeue plans.",
        value=sum(values.get(counters.PLAN_ROWS_PROCESSED, {}).values()),
    )


def _task_metrics() -> Iterator[Metric]:
    runs = CounterMetricFamily("opensquilla_task_runs", "Celery task runs.", labels=["task"])
    failures = CounterMetricFamily(
        "opensquilla_task_failures", "Celery task runs that failed.", labels=["task"]
    )
    durations = SummaryMetricFamily(
        "opensquilla_task_duration_seconds", "Celery task run time.", labels=["task"]
    )
    for task, n, failed, total_ms in TaskStat.objects.values_list(
        "task", "runs", "failures", "duration_sum_ms"
    ):
        runs.add_metric([task], n)
        failures.add_metric([task], failed)
        durations.add_metric([task], count_value=n, sum_value=total_ms / 1000)
    yield from (runs, failures, durations)


def _liveness_metrics(gateways: set[str]) -> Iterator[Metric]:
    rows = heartbeats.heartbeats()
    worker = GaugeMetricFamily(
        "opensquilla_worker_last_heartbeat_timestamp_seconds",
        "Unix time of each running Celery worker's last heartbeat.",
        labels=["worker"],
    )
    beat = GaugeMetricFamily(
        "opensquilla_beat_last_tick_timestamp_seconds",
        "Unix time of beat's last scheduled publish.",
        labels=["beat"],
    )
    mirror = GaugeMetricFamily(
        "opensquilla_mirror_process_last_heartbeat_timestamp_seconds",
        "Unix time of each running mirror process's last heartbeat (central or a gateway's).",
        labels=["process"],
    )
    gauges = {"worker": worker, "beat": beat, "mirror": mirror}
    for row in rows:
        if row.state != "running" or row.kind not in gauges:
            continue
        gauges[row.kind].add_metric([row.name], row.seen_at / 1000)
    yield from (worker, beat, mirror)
    depth = GaugeMetricFamily(
        "opensquilla_queue_depth", "Messages waiting per Celery queue.", labels=["queue"]
    )
    # Every gateway with receipts has its queue here (from the counts already read).
    for q in queue_depths(gateways=gateways):
        if q.depth is not None:
            depth.add_metric([q.queue], q.depth)
    yield depth
    mirrors = mirror_views()
    if mirrors:
        lag = GaugeMetricFamily(
            "opensquilla_mirror_lag_seconds",
            "How far the live mirror is behind its OpenSquilla sessions.db, per gateway.",
            labels=["source", "gateway"],  # source: its number among the gateway's
        )
        for source, m in _numbered_sources(mirrors):
            if m.lag_seconds is not None:
                lag.add_metric([source, m.gateway], m.lag_seconds)
        yield lag


def _numbered_sources(mirrors: list[MirrorView]) -> list[tuple[str, MirrorView]]:
    """Each followed source named by its place among its gateway's (``1``, ``2``… in the
    liveness page's order), not by its ``sessions.db`` path: a read-scope scraper sees states
    only, as a viewer does on every page (receipts_app/mirror/exposure.py)."""
    numbered: list[tuple[str, MirrorView]] = []
    seen: dict[str, int] = {}
    for m in sorted(mirrors, key=lambda m: (m.gateway, m.source)):
        seen[m.gateway] = seen.get(m.gateway, 0) + 1
        numbered.append((str(seen[m.gateway]), m))
    return numbered


def _gateway_link_metrics(now: int) -> Iterator[Metric]:
    """The gateway link's stored readings and the gap: one query when no gateway is linked,
    two when some are (docs/MIRROR.md#gateway-link)."""
    verdicts = list(
        GatewayMemoryVerdict.objects.select_related("gateway").order_by("gateway_id", "agent_id")
    )
    if not verdicts:
        return
    links = {v.gateway_id: v.gateway for v in verdicts}
    state = GaugeMetricFamily(
        "opensquilla_gateway_link_state",
        "1 for the state of each linked gateway's last reading (ok, unreachable, timeout, "
        "token_refused, guest, forbidden, unknown_method, protocol_unsupported, ...), else 0.",
        labels=["gateway", "state"],
    )
    age = GaugeMetricFamily(
        "opensquilla_gateway_link_age_seconds",
        "Seconds since each linked gateway was last asked.",
        labels=["gateway"],
    )
    for name, link in sorted(links.items()):
        for s in LinkState:
            state.add_metric([name, s.value], 1.0 if link.state == s.value else 0.0)
        age.add_metric([name], max(0, now - link.checked_at) / 1000)
    yield from (state, age)
    backlog = GaugeMetricFamily(
        "opensquilla_gateway_repair_backlog",
        "The repair backlog each gateway itself reports per agent (doctor.memory.status), "
        "as last answered.",
        labels=["gateway", "agent"],
    )
    safety = GaugeMetricFamily(
        "opensquilla_gateway_memory_safety_error",
        "1 when the gateway itself last said the agent's memory safety is not ok.",
        labels=["gateway", "agent"],
    )
    gap = GaugeMetricFamily(
        "opensquilla_gateway_memory_gap",
        "Mirrored receipts the gateway and this console count differently (open on one side, "
        "resolved on the other), per gateway and agent.",
        labels=["gateway", "agent"],
    )
    gaps = gap_counts(filter_receipts(ReceiptFilter(gap="any")))
    own_state = GaugeMetricFamily(
        "opensquilla_gateway_memory_state",
        "1 for the state each gateway itself last gave an agent's memory, in the console's "
        "words (at_risk, repairing, ok), as last answered; else 0.",
        labels=["gateway", "agent", "state"],
    )
    for v in verdicts:
        if v.answered_at is None:
            continue
        backlog.add_metric([v.gateway_id, v.agent_id], v.repair_backlog_count or 0)
        safety.add_metric([v.gateway_id, v.agent_id], 0.0 if v.memory_safety == "ok" else 1.0)
        theirs = v.own_state
        for s_ in SEVERITY:
            own_state.add_metric([v.gateway_id, v.agent_id, s_.value], float(theirs == s_))
    agents = {(v.gateway_id, v.agent_id) for v in verdicts} | {k for k in gaps if k[0] in links}
    for gateway, agent in sorted(agents):
        gap.add_metric([gateway, agent], gaps.get((gateway, agent), {}).get("total", 0))
    yield from (backlog, safety, own_state, gap)


class OpensquillaCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        now = timeutil.now_ms()
        # The counts and each agent's one state (health's heuristic included), one read.
        counts, states = counts_and_verdicts()
        yield from _ledger_metrics(now, counts, states)
        yield from _counter_metrics()
        yield from _task_metrics()
        yield from _liveness_metrics({row.gateway_id for row in counts})
        yield from _gateway_link_metrics(now)


def render_metrics() -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(OpensquillaCollector())
    return generate_latest(registry)
