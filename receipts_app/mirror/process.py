"""A mirror process announces itself while it runs (its heartbeat on the liveness page).

``run_mirror`` and ``import_opensquilla --follow`` wrap their loop in :func:`announced`: the
process is listed centrally as ``mirror@HOST`` (``mirror-NAME@HOST`` when it follows one
gateway other than ``local``, as an edge host's does), with the gateways it follows and what it
does: ``following`` its sources, or ``idle`` when none is configured (it then waits, so that
``make run`` keeps running). The heartbeat itself is operations_app's, on the signals.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager

from sessions_app.gateways import DEFAULT_GATEWAY

from ..signals import process_started, process_stopped

log = logging.getLogger(__name__)

IDLE = "idle"
FOLLOWING = "following"


def process_name(gateways: list[str]) -> str:
    host = socket.gethostname()
    named = sorted(set(gateways))
    if len(named) == 1 and named[0] != DEFAULT_GATEWAY:
        return f"mirror-{named[0]}@{host}"
    return f"mirror@{host}"


@contextmanager
def announced(gateways: list[str]) -> Iterator[None]:
    """While the block runs, the process is announced as following ``gateways`` (none: idle)."""
    named = sorted(set(gateways))
    name = process_name(named)
    details = {
        "gateway": named[0] if len(named) == 1 else "",
        "gateways": named,
        "activity": FOLLOWING if named else IDLE,
    }
    try:
        process_started.send(sender=None, kind="mirror", name=name, details=details)
    except Exception as exc:  # noqa: BLE001 - being listed must never stop the mirror
        log.warning("mirror: could not record the process's heartbeat: %s", exc)
    try:
        yield
    finally:
        try:
            process_stopped.send(sender=None, kind="mirror", name=name)
        except Exception as exc:  # noqa: BLE001
            log.warning("mirror: could not record the process's stop: %s", exc)
