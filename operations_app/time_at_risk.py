"""Time at risk: for every failure, how long until it was recovered, acknowledged or superseded.

Fed by a beat task (``track_time_at_risk``) that compares the ledger with the open intervals,
not by a hook in the write path: it sees every way a status changes (single and bulk upserts,
imports, the mirror, requeues, raw SQL) at no cost to the writes, which osq15 keeps fast.

- Open: a receipt in an at-risk status with no open interval gets one, starting at its
  ``updated_at`` (the write that made it fail, to within one run of the task).
- Close: an open interval whose receipt now has a success or resolved status is closed at the
  receipt's ``updated_at`` (the resolving write) with that status as its resolution; a receipt
  that vanished (session deleted) is closed as ``purged``. Intermediate states (requeued,
  repair pending or running) keep the interval open: memory is not safe yet.
- "At risk now" (open failures, and since when) is read from the ledger by the one definition
  (``receipts_app.health.at_risk_by_gateway_agent``), not from the intervals, so the panel says
  what the overview's cards, its failure groups and ``/metrics`` say, with no lag.
- Every close adds one to the daily rollup of its gateway, agent and day, in the same
  transaction, so the 30/90-day mean time to recovery reads at most 90 rows per agent whatever
  the ledger's size.

Per (gateway, agent): the same agent name on two gateways is two rows. An interval carries its
receipt's gateway; the reader covers every gateway, or the one an edge chose
(``sessions_app.gateways.gateway_scope``: the console's ``?gateway=``), through the counts and
the models' ``GatewayManager``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import F, Max, Q

from opensquilla_site import timeutil
from receipts_app.counts import receipt_counts
from receipts_app.health import at_risk_by_gateway_agent
from receipts_app.models import MemoryDurableReceipt
from receipts_app.statuses import AT_RISK_STATUSES, RESOLVED_STATUSES, SUCCESS_STATUSES
from sessions_app.gateways import DEFAULT_GATEWAY

from .counters import read_counters
from .ledger_state import oldest_at_risk
from .models import OpsCounter, RiskDaily, RiskInterval

CLOSING_STATUSES: tuple[str, ...] = tuple(dict.fromkeys(RESOLVED_STATUSES + SUCCESS_STATUSES))
PURGED = "purged"
# The task re-reads at-risk rows written this long before its previous run, so a write that
# committed late (a long transaction) is still seen.
RESCAN_SLACK_MS = 10 * 60 * 1000
CHUNK = 1000
# Where the previous run stopped (time and highest receipt id), kept with the counters.
CURSOR = "time_at_risk_cursor"
# Ids are handed out before commit: re-read this many below the previous maximum, so a row
# whose transaction committed after the previous run read the maximum is still seen.
RESCAN_SLACK_IDS = 10_000


@dataclass
class TrackSummary:
    opened: int = 0
    closed: int = 0


def _day(ms: int) -> date:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).date()


def _add_to_rollup(gateway: str, agent: str, resolved_at: int, duration_ms: int) -> None:
    day = _day(resolved_at)
    key = {"day": day, "gateway_id": gateway, "agent_id": agent}
    updated = RiskDaily.objects.filter(**key).update(
        resolved=F("resolved") + 1, duration_sum_ms=F("duration_sum_ms") + duration_ms
    )
    if updated:
        return
    try:
        with transaction.atomic():
            RiskDaily.objects.create(**key, resolved=1, duration_sum_ms=duration_ms)
    except IntegrityError:
        RiskDaily.objects.filter(**key).update(
            resolved=F("resolved") + 1, duration_sum_ms=F("duration_sum_ms") + duration_ms
        )


def _close_resolved(now: int, out: TrackSummary) -> None:
    open_rows = list(
        RiskInterval.objects.filter(resolved_at__isnull=True).values_list(
            "pk", "receipt_id", "gateway_id", "agent_id", "started_at"
        )
    )
    for start in range(0, len(open_rows), CHUNK):
        chunk = open_rows[start : start + CHUNK]
        current = {
            rid: (status, updated)
            for rid, status, updated in MemoryDurableReceipt.objects.filter(
                receipt_id__in=[rid for _pk, rid, _g, _a, _s in chunk]
            ).values_list("receipt_id", "status", "updated_at")
        }
        for pk, rid, gateway, agent, started in chunk:
            status, updated = current.get(rid, (PURGED, now))
            if status != PURGED and status not in CLOSING_STATUSES:
                continue
            resolved_at = max(started, updated)
            with transaction.atomic():
                if RiskInterval.objects.filter(pk=pk, resolved_at__isnull=True).update(
                    resolved_at=resolved_at, resolution=status
                ):
                    _add_to_rollup(gateway, agent, resolved_at, resolved_at - started)
                    out.closed += 1


def _open_new(since: int | None, after_id: int | None, out: TrackSummary) -> None:
    rows = MemoryDurableReceipt.objects.filter(status__in=AT_RISK_STATUSES)
    if since is not None and after_id is not None:
        # Rows written since the last run (a status change stamps updated_at), and rows
        # inserted since then whatever their timestamps (an import keeps the original ones).
        rows = rows.filter(Q(updated_at__gte=since) | Q(id__gt=after_id))
    candidates = list(
        rows.order_by().values_list(
            "receipt_id", "gateway_id", "agent_id", "scope", "status", "updated_at"
        )
    )
    for start in range(0, len(candidates), CHUNK):
        chunk = candidates[start : start + CHUNK]
        already = set(
            RiskInterval.objects.filter(
                resolved_at__isnull=True, receipt_id__in=[c[0] for c in chunk]
            ).values_list("receipt_id", flat=True)
        )
        new = [
            RiskInterval(
                receipt_id=rid,
                gateway_id=gateway,
                agent_id=agent,
                scope=scope,
                failed_status=status,
                started_at=upd,
            )
            for rid, gateway, agent, scope, status, upd in chunk
            if rid not in already
        ]
        if new:
            # ignore_conflicts: a concurrent run opening the same interval is not an error.
            RiskInterval.objects.bulk_create(new, ignore_conflicts=True)
            out.opened += len(new)


def track_time_at_risk(now: int | None = None) -> TrackSummary:
    now = timeutil.now_ms() if now is None else now
    marks = read_counters().get(CURSOR, {})
    last_run, last_id = marks.get("run_ms"), marks.get("max_id")
    max_id = MemoryDurableReceipt.objects.aggregate(m=Max("id"))["m"] or 0
    out = TrackSummary()
    _close_resolved(now, out)
    _open_new(
        None if last_run is None else last_run - RESCAN_SLACK_MS,
        None if last_id is None else last_id - RESCAN_SLACK_IDS,
        out,
    )
    _set_mark("run_ms", now)
    _set_mark("max_id", max_id)
    return out


def _set_mark(label: str, value: int) -> None:
    OpsCounter.objects.update_or_create(name=CURSOR, label=label, defaults={"value": value})


# --- reading -------------------------------------------------------------------------------


@dataclass
class AgentTimeAtRisk:
    agent: str
    gateway: str = DEFAULT_GATEWAY
    # At risk now, by the one definition (the overview card, groups and /metrics agree).
    open_failures: int = 0
    at_risk_since: int | None = None  # epoch ms: created_at of the oldest receipt at risk
    at_risk_for_s: float | None = None
    mttr_30d_s: float | None = None
    mttr_90d_s: float | None = None
    resolved_30d: int = 0
    resolved_90d: int = 0
    # Mean time to recovery per day, oldest first (None: nothing resolved that day).
    daily_mttr_s: list[float | None] = field(default_factory=list)

    def bars(self, width: int = 270, height: int = 24) -> list[dict[str, float]]:
        """The 90-day trend as SVG bars (scaled to the worst day)."""
        peak = max((v for v in self.daily_mttr_s if v), default=0.0)
        step = width / max(1, len(self.daily_mttr_s))
        bars = []
        for index, value in enumerate(self.daily_mttr_s):
            if not value or not peak:
                continue
            h = max(1.0, height * value / peak)
            bars.append({"x": index * step, "y": height - h, "w": max(1.0, step - 1), "h": h})
        return bars


def time_at_risk_by_agent(now: int | None = None, days: int = 90) -> list[AgentTimeAtRisk]:
    """Per (gateway, agent): at risk now and since when, as ``/metrics`` counts it (the counts
    table and one probe of the oldest row at risk), and MTTR over 30 and 90 days from the
    closed intervals' daily rollups. Three queries. Sorted by agent, then gateway."""
    now = timeutil.now_ms() if now is None else now
    today = _day(now)
    first_day = today - timedelta(days=days - 1)
    agents: dict[tuple[str, str], AgentTimeAtRisk] = {}

    def entry(key: tuple[str, str]) -> AgentTimeAtRisk:
        if key not in agents:
            agents[key] = AgentTimeAtRisk(agent=key[1], gateway=key[0])
        return agents[key]

    counts = receipt_counts()  # the gateway scope's, when an edge chose one
    for key, n in at_risk_by_gateway_agent(counts).items():
        entry(key).open_failures = n
    for key, since in oldest_at_risk(counts).items():
        at_risk = entry(key)
        at_risk.at_risk_since = since
        at_risk.at_risk_for_s = max(0, now - since) / 1000
    daily: dict[tuple[str, str], dict[date, tuple[int, int]]] = {}
    for day, gateway, agent, resolved, total in RiskDaily.objects.filter(
        day__gte=first_day
    ).values_list("day", "gateway_id", "agent_id", "resolved", "duration_sum_ms"):
        daily.setdefault((gateway, agent), {})[day] = (resolved, total)
        entry((gateway, agent))
    for key, item in agents.items():
        per_day = daily.get(key, {})
        series: list[float | None] = []
        for offset in range(days):
            resolved, total = per_day.get(first_day + timedelta(days=offset), (0, 0))
            series.append(total / resolved / 1000 if resolved else None)
        item.daily_mttr_s = series
        for window in (30, 90):
            since_day = today - timedelta(days=window - 1)
            rows = [v for d, v in per_day.items() if d >= since_day]
            resolved = sum(r for r, _t in rows)
            total = sum(t for _r, t in rows)
            mttr = total / resolved / 1000 if resolved else None
            if window == 30:
                item.resolved_30d, item.mttr_30d_s = resolved, mttr
            else:
                item.resolved_90d, item.mttr_90d_s = resolved, mttr
    return [agents[k] for k in sorted(agents, key=lambda k: (k[1], k[0]))]
