"""What a viewer may read of the liveness report: states, not hosts.

The same rule as the mirror's (receipts_app/mirror/exposure.py): the host names, process ids
and node names of the processes (``celery@host``, ``mirror-b@host``, the supervisor's pid),
the mirror's ``sessions.db`` paths and the broker's raw errors are details for the operators
who run them. A viewer (the console's viewer role) gets the same report with them emptied: each
process's kind, gateway, state, restarts, last exit and age stay, and so do each gateway's
count of live workers, so a viewer still sees whether everything runs.
"""

from __future__ import annotations

from dataclasses import replace

from .heartbeats import HeartbeatView
from .liveness import GatewayQueue, LivenessReport, ProcessLiveness
from .mirror import MirrorView, SkippedRowView
from .processes import ProcessRow
from .queues import QueueDepth


def _heartbeat(hb: HeartbeatView) -> HeartbeatView:
    details = hb.details or {}
    kept: dict[str, object] = {k: details[k] for k in ("gateway", "activity") if k in details}
    return replace(hb, name=hb.kind, details=kept)


def _process(row: ProcessRow) -> ProcessRow:
    # A supervised process is named as in its Procfile (worker, mirror, web); any other by the
    # node name it reports, which names its host: then its kind stands in.
    name = row.name if row.process == "" or row.name != row.process else row.kind
    return replace(row, name=name, process="", host="")


def _gateway_queue(row: GatewayQueue) -> GatewayQueue:
    return replace(row, workers=[""] * len(row.workers))


def _queue(row: QueueDepth) -> QueueDepth:
    return replace(row, error="") if getattr(row, "error", None) else row


def _mirror(row: MirrorView) -> MirrorView:
    return replace(row, source="")


def _skipped(row: SkippedRowView) -> SkippedRowView:
    return replace(row, source="")


def liveness_for_viewer(report: LivenessReport) -> LivenessReport:
    """``report`` with every host, node name, pid, path and raw error emptied."""
    return replace(
        report,
        workers=[ProcessLiveness(_heartbeat(w.heartbeat), w.alive) for w in report.workers],
        beats=[ProcessLiveness(_heartbeat(b.heartbeat), b.alive) for b in report.beats],
        processes=[_process(p) for p in report.processes],
        gateway_queues=[_gateway_queue(g) for g in report.gateway_queues],
        queues=[_queue(q) for q in report.queues],
        mirrors=[_mirror(m) for m in report.mirrors],
        skipped=[_skipped(s) for s in report.skipped],
        hosts_hidden=True,
    )
