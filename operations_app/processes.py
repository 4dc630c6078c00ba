"""The processes of the deployment: where each runs, its state, how often it was restarted.

Two sources, one row per process. Every worker, beat and mirror process writes its own
heartbeat (``pulse``) wherever it runs, central or on a gateway's host, carrying its host,
gateway, what it does and its supervisor's restart record: those rows are the processes of
every host. ``opensquilla_site.gentle_stop --restart NAME`` (the Procfile) also writes one
status file per process under ``<VAR_DIR>/run/processes/`` on its own host; a process of this
host that writes no heartbeat (the web server) is listed from that file. A status whose
supervisor is gone (``make run`` ended, or was killed) shows as stopped. Deployments run by
another process manager have no such files: restarts are then its to report.
"""

from __future__ import annotations

import json
import logging
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings

from opensquilla_site.gentle_stop import STATUS_FOLDER, pid_alive

if TYPE_CHECKING:
    from .heartbeats import HeartbeatView

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SupervisedProcess:
    name: str
    state: str  # running, restarting, stopped
    restarts: int
    started_at: int | None  # epoch ms of the current (or last) start
    last_exit: str  # "signal SIGKILL", "code 1"; "" before any exit
    last_exit_at: int | None
    # Several instances of one command (the web server's gunicorn masters, ``--instances``):
    # how many there are and how many run now; 1 and 1 (or 0) for a single process.
    instances: int = 1
    instances_running: int = 0
    pid: int | None = None  # the running command's (the first instance's), as last written


def _read(path: Path) -> SupervisedProcess | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    state = str(data.get("state") or "unknown")
    if state != "stopped" and not pid_alive(data.get("supervisor_pid")):
        state = "stopped"
    last_exit = data.get("last_exit")
    if not isinstance(last_exit, dict):
        last_exit = {}
    started = data.get("started_at")
    copies = data.get("instances")
    copies = [c for c in copies if isinstance(c, dict)] if isinstance(copies, list) else []
    running = sum(1 for c in copies if c.get("state") == "running")
    exited = last_exit.get("at")
    return SupervisedProcess(
        name=str(data.get("name") or path.stem),
        state=state,
        restarts=int(data.get("restarts") or 0),
        started_at=started if isinstance(started, int) else None,
        last_exit=str(last_exit.get("text") or ""),
        last_exit_at=exited if isinstance(exited, int) else None,
        instances=max(1, len(copies)),
        instances_running=running if state != "stopped" else 0,
        pid=data.get("pid") if isinstance(data.get("pid"), int) else None,
    )


def supervised_processes() -> list[SupervisedProcess]:
    """Every process with a status file, by name; empty when none is supervised here."""
    folder = Path(settings.VAR_DIR) / STATUS_FOLDER
    try:
        paths = sorted(folder.glob("*.json"))
    except OSError:
        return []
    return [p for p in (_read(path) for path in paths) if p is not None]


@dataclass(frozen=True)
class ProcessRow:
    """One process as the liveness page's Processes panel shows it."""

    name: str  # the Procfile name when supervised (worker, mirror…), else the process's own
    process: str  # the name it reports under (``celery@host``, ``mirror-b@host``), or ""
    kind: str  # worker, beat, mirror, or "" (web: a status file only)
    host: str
    gateway: str  # the gateway it serves ("" when it serves every gateway or none)
    state: str  # running, idle (a mirror following nothing), restarting, silent, stopped
    restarts: int | None  # None: not supervised by make run / make run-edge
    last_exit: str
    last_exit_at: int | None
    started_at: int | None
    instances: int = 1
    instances_running: int = 0
    activity: str = ""  # what it does, in words ("follows nothing: no source configured")

    @property
    def up(self) -> bool:
        """Running (an idle mirror runs too: it waits for a source to be configured)."""
        return self.state in ("running", "idle")


def _heartbeat_state(hb: HeartbeatView, stale_ms: float) -> str:
    if hb.state == "stopped":
        return "stopped"
    if hb.age_ms > stale_ms:
        return "silent"
    if (hb.details or {}).get("activity") == "idle":
        return "idle"
    return "running"


def _activity(hb: HeartbeatView) -> str:
    details = hb.details or {}
    if hb.kind == "mirror":
        if details.get("activity") == "idle":
            return "follows nothing: no source is configured"
        gateways = details.get("gateways") or []
        return "follows " + ", ".join(str(g) for g in gateways) if gateways else ""
    if hb.kind == "worker" and hb.queues:
        return "consumes " + ", ".join(hb.queues)
    return ""


def process_rows(
    beats: list[HeartbeatView], local: list[SupervisedProcess], stale_ms: float
) -> list[ProcessRow]:
    """Every process that reports a heartbeat, plus the supervised processes of this host that
    do not (a status file no heartbeat of this host names): by gateway, host and name."""
    here = socket.gethostname()
    by_name = {p.name: p for p in local}
    covered: set[str] = set()
    rows: list[ProcessRow] = []
    for hb in beats:
        details: dict[str, Any] = hb.details or {}
        supervisor = details.get("supervisor")
        supervisor = supervisor if isinstance(supervisor, dict) else None
        host = str(details.get("host") or "")
        name = str(supervisor.get("name")) if supervisor else hb.name
        status = by_name.get(name) if supervisor and host == here else None
        if status is not None and status.pid not in (None, details.get("pid")):
            status = None  # another set's process of the same name on this host (an edge's)
        if status is not None:
            covered.add(name)  # this host's own record of it is fresher than the heartbeat's
        restarts = status.restarts if status else (supervisor or {}).get("restarts")
        rows.append(
            ProcessRow(
                name=name,
                process=hb.name,
                kind=hb.kind,
                host=host,
                gateway=str(details.get("gateway") or ""),
                state=_heartbeat_state(hb, stale_ms),
                restarts=int(restarts) if isinstance(restarts, int) else None,
                last_exit=status.last_exit
                if status
                else str((supervisor or {}).get("last_exit") or ""),
                last_exit_at=(
                    status.last_exit_at if status else (supervisor or {}).get("last_exit_at")
                ),
                started_at=hb.started_at,
                activity=_activity(hb),
            )
        )
    for p in local:
        if p.name in covered:
            continue
        rows.append(
            ProcessRow(
                name=p.name,
                process="",
                kind="",
                host=here,
                gateway="",
                state=p.state,
                restarts=p.restarts,
                last_exit=p.last_exit,
                last_exit_at=p.last_exit_at,
                started_at=p.started_at,
                instances=p.instances,
                instances_running=p.instances_running,
            )
        )
    return sorted(rows, key=lambda r: (r.gateway != "", r.gateway, r.host, r.name, r.process))
