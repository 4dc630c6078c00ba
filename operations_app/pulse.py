"""A process's own heartbeat: a timer thread in the process writes it, whatever the broker.

Celery's ``heartbeat_sent`` comes from its event dispatcher, which sends nothing over SQL
transports (the embedded broker): a worker that works would read silent. So each worker, and
each mirror follower process, starts a :class:`Pulse` when it is ready: a daemon thread that
upserts its ``Heartbeat`` row every ``OPENSQUILLA_HEARTBEAT_INTERVAL_SECONDS`` (10 s), on its
own database connection, while the process's main thread (or its pool) is busy with tasks.
The liveness page, ``/metrics`` and the "no worker heartbeat" alert read that row.

Each beat carries what the central liveness page shows of the process wherever it runs: its
host, pid, gateway, what it is doing (``activity``), and, under ``make run`` / ``make
run-edge``, its supervisor's record (restarts, last exit) read from the wrapper's status file
(``opensquilla_site.gentle_stop``).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connections

from opensquilla_site.gentle_stop import SUPERVISED_ENV, read_status

from . import heartbeats

logger = logging.getLogger(__name__)

_pulses: dict[tuple[str, str], Pulse] = {}
_lock = threading.Lock()


def interval_s() -> float:
    return float(getattr(settings, "OPENSQUILLA_HEARTBEAT_INTERVAL_SECONDS", 10))


def supervisor_record() -> dict[str, Any] | None:
    """This process's restart record, when ``gentle_stop --restart NAME`` runs it."""
    name = os.environ.get(SUPERVISED_ENV)
    if not name:
        return None
    data = read_status(name)
    if data is None:
        return {"name": name, "restarts": 0}
    last_exit = data.get("last_exit")
    if not isinstance(last_exit, dict):
        last_exit = {}
    return {
        "name": name,
        "restarts": int(str(data.get("restarts") or 0)),
        "last_exit": str(last_exit.get("text") or ""),
        "last_exit_at": last_exit.get("at") if isinstance(last_exit.get("at"), int) else None,
    }


def process_facts() -> dict[str, Any]:
    """Where this process runs and who supervises it: part of every beat."""
    facts: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid()}
    record = supervisor_record()
    if record is not None:
        facts["supervisor"] = record
    return facts


class Pulse:
    """The heartbeat thread of one process (``kind``, ``name``)."""

    def __init__(
        self, kind: str, name: str, details: Callable[[], dict[str, Any]] | None = None
    ) -> None:
        self.kind, self.name = kind, name
        self._details = details or dict
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def details(self) -> dict[str, Any]:
        return {**self._details(), **process_facts()}

    def start(self) -> None:
        heartbeats.mark_started(self.kind, self.name, self.details())
        self._spawn()

    def _spawn(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"pulse-{self.kind}", daemon=True)
        self._thread.start()

    def beat(self) -> None:
        heartbeats.record_heartbeat(self.kind, self.name, details=self.details(), force=True)

    def _run(self) -> None:
        try:
            while not self._stop.wait(interval_s()):
                try:
                    close_old_connections()
                    self.beat()
                except Exception:  # noqa: BLE001 - a missed beat is logged, the next one tries
                    logger.warning("could not write the %s heartbeat", self.kind, exc_info=True)
        finally:
            connections.close_all()

    def stop(self) -> None:
        """Stop beating (before the process records itself stopped)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)


def start_pulse(kind: str, name: str, details: Callable[[], dict[str, Any]] | None = None) -> Pulse:
    """Start (once per process) the heartbeat of ``(kind, name)``."""
    with _lock:
        pulse = _pulses.get((kind, name))
        if pulse is not None:
            return pulse
        pulse = _pulses[(kind, name)] = Pulse(kind, name, details)
    pulse.start()
    return pulse


def stop_pulse(kind: str, name: str) -> None:
    """Stop the heartbeat of ``(kind, name)`` and record the process as stopped."""
    with _lock:
        pulse = _pulses.pop((kind, name), None)
    if pulse is not None:
        pulse.stop()
    heartbeats.record_heartbeat(kind, name, state="stopped")


def announced_process_started(
    sender: object, *, kind: str, name: str, details: dict[str, Any], **_: Any
) -> None:
    """``receipts_app.signals.process_started``: the process's heartbeat begins."""
    start_pulse(kind, name, lambda: details)


def announced_process_stopped(sender: object, *, kind: str, name: str, **_: Any) -> None:
    stop_pulse(kind, name)
