"""The processes ``make run`` supervises: how often each was restarted, and why.

``opensquilla_site.gentle_stop --restart NAME`` (the Procfile) writes one status file per
process under ``<VAR_DIR>/run/processes/``; this reads them for the liveness page. A status
whose supervisor is gone (``make run`` ended, or was killed) shows as stopped. Deployments run
by another process manager have no such files: the page then says restarts are its to report.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from opensquilla_site.gentle_stop import STATUS_FOLDER

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


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read(path: Path) -> SupervisedProcess | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    state = str(data.get("state") or "unknown")
    if state != "stopped" and not _alive(data.get("supervisor_pid")):
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
    )


def supervised_processes() -> list[SupervisedProcess]:
    """Every process with a status file, by name; empty when none is supervised here."""
    folder = Path(settings.VAR_DIR) / STATUS_FOLDER
    try:
        paths = sorted(folder.glob("*.json"))
    except OSError:
        return []
    return [p for p in (_read(path) for path in paths) if p is not None]
