"""Are the workers and the scheduler alive, is work piling up, is the mirror keeping up?

One report for the liveness page (and the alert rules that watch the same signals): each part
says how old its information is, because a heartbeat table can only tell when it last heard.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.conf import settings

from opensquilla_site import timeutil

from .heartbeats import HeartbeatView, heartbeats
from .mirror import MirrorView, SkippedRowView, mirror_skipped_rows, mirror_views
from .processes import ProcessRow, process_rows, supervised_processes
from .queues import QueueDepth, queue_depths


def stale_after_s() -> float:
    """A worker or beat not heard from for this long is shown (and alerted) as silent."""
    return float(getattr(settings, "OPENSQUILLA_HEARTBEAT_STALE_SECONDS", 60))


def queue_consumers(
    now: int | None = None, rows: list[HeartbeatView] | None = None
) -> dict[str, list[str]]:
    """``{queue: [worker names]}`` of the live workers: each worker records the queues it
    consumes when it starts (``celery_signals``). ``rows``: the heartbeats a caller has read
    already (None: one read now)."""
    now = timeutil.now_ms() if now is None else now
    rows = heartbeats(now) if rows is None else rows
    limit = stale_after_s() * 1000
    out: dict[str, list[str]] = {}
    for hb in rows:
        if hb.kind == "worker" and hb.state == "running" and hb.age_ms <= limit:
            for queue in hb.queues:
                out.setdefault(queue, []).append(hb.name)
    return out


@dataclass(frozen=True)
class GatewayQueue:
    """One gateway's queue and the live workers consuming it (none: its work waits)."""

    gateway: str
    queue: str
    workers: list[str]
    warning: str = ""


def gateway_queues(consumers: dict[str, list[str]] | None = None) -> list[GatewayQueue]:
    """A row per gateway: ``local`` on the default queue, every other on ``gateway.<name>``."""
    from sessions_app.gateways import (
        DEFAULT_GATEWAY,
        Gateway,
        gateway_queue,
        no_worker_warning,
    )

    from .queues import default_queue

    consumers = queue_consumers() if consumers is None else consumers
    names = set(Gateway.objects.values_list("name", flat=True)) | {DEFAULT_GATEWAY}
    rows = []
    for name in sorted(names, key=lambda n: (n != DEFAULT_GATEWAY, n)):
        queue = gateway_queue(name) or default_queue()
        workers = consumers.get(queue, [])
        warning = "" if workers or name == DEFAULT_GATEWAY else no_worker_warning(name)
        rows.append(GatewayQueue(name, queue, workers, warning))
    return rows


@dataclass(frozen=True)
class ProcessLiveness:
    heartbeat: HeartbeatView
    alive: bool

    @property
    def age_s(self) -> float:
        return self.heartbeat.age_ms / 1000


@dataclass
class LivenessReport:
    generated_at: int
    stale_after_s: float
    workers: list[ProcessLiveness] = field(default_factory=list)
    beats: list[ProcessLiveness] = field(default_factory=list)
    queues: list[QueueDepth] = field(default_factory=list)
    mirrors: list[MirrorView] = field(default_factory=list)
    skipped: list[SkippedRowView] = field(default_factory=list)  # newest 200
    # Every process that reports a heartbeat (workers, beat, mirror processes, on any host)
    # and those of this host supervised by ``make run`` that do not (web): one row each.
    processes: list[ProcessRow] = field(default_factory=list)
    gateway_queues: list[GatewayQueue] = field(default_factory=list)
    # Set for a viewer (operations_app/exposure.py): hosts, node names and paths were emptied.
    hosts_hidden: bool = False

    @property
    def restarts(self) -> int:
        return sum(p.restarts or 0 for p in self.processes)

    @property
    def idle_mirrors(self) -> list[ProcessRow]:
        """Mirror processes that run but follow nothing (no source configured): the Live
        mirror panel says so, as the Processes panel does."""
        return [p for p in self.processes if p.kind == "mirror" and p.state == "idle"]

    @property
    def workers_alive(self) -> int:
        return sum(1 for w in self.workers if w.alive)

    @property
    def beat_alive(self) -> bool:
        return any(b.alive for b in self.beats)


def liveness_report(now: int | None = None) -> LivenessReport:
    now = timeutil.now_ms() if now is None else now
    limit = stale_after_s()
    report = LivenessReport(generated_at=now, stale_after_s=limit)
    rows = heartbeats(now)
    for hb in rows:
        entry = ProcessLiveness(hb, hb.state == "running" and hb.age_ms / 1000 <= limit)
        if hb.kind == "worker":
            report.workers.append(entry)
        elif hb.kind == "beat":
            report.beats.append(entry)
    report.queues = queue_depths()
    report.mirrors = mirror_views()
    report.skipped = mirror_skipped_rows()
    report.processes = process_rows(rows, supervised_processes(), limit * 1000)
    report.gateway_queues = gateway_queues(queue_consumers(now, rows))
    return report
