"""Record and read the heartbeats of Celery workers, beat and the mirror's processes.

Workers and mirror processes write theirs from a timer thread of their own (``pulse``), beat
whenever it publishes a scheduled task. Writes are throttled per process to one every
``WRITE_INTERVAL_MS``, so a heartbeat costs the database one UPDATE per process per interval.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction

from opensquilla_site import timeutil

from .models import Heartbeat

WRITE_INTERVAL_MS = 10_000
_last_write: dict[tuple[str, str], int] = {}
_lock = threading.Lock()


def _due(kind: str, name: str, now: int, force: bool) -> bool:
    with _lock:
        last = _last_write.get((kind, name))
        if not force and last is not None and now - last < WRITE_INTERVAL_MS:
            return False
        _last_write[(kind, name)] = now
        return True


def record_heartbeat(
    kind: str,
    name: str,
    *,
    state: str = "running",
    details: dict[str, Any] | None = None,
    force: bool = False,
    now: int | None = None,
) -> bool:
    """Upsert the heartbeat of ``(kind, name)``; False when throttled (nothing written)."""
    now = timeutil.now_ms() if now is None else now
    if not _due(kind, name, now, force or state != "running"):
        return False
    fields: dict[str, Any] = {"seen_at": now, "state": state}
    if details is not None:
        fields["details"] = details
    if Heartbeat.objects.filter(kind=kind, name=name).update(**fields):
        return True
    try:
        with transaction.atomic():
            Heartbeat.objects.create(kind=kind, name=name, started_at=now, **fields)
    except IntegrityError:
        Heartbeat.objects.filter(kind=kind, name=name).update(**fields)
    return True


def mark_started(kind: str, name: str, details: dict[str, Any] | None = None) -> None:
    now = timeutil.now_ms()
    fields = {"seen_at": now, "started_at": now, "state": "running", "details": details or {}}
    updated = Heartbeat.objects.filter(kind=kind, name=name).update(**fields)
    if not updated:
        try:
            with transaction.atomic():
                Heartbeat.objects.create(kind=kind, name=name, **fields)
        except IntegrityError:
            Heartbeat.objects.filter(kind=kind, name=name).update(**fields)
    with _lock:
        _last_write[(kind, name)] = now


@dataclass(frozen=True)
class HeartbeatView:
    kind: str
    name: str
    state: str
    seen_at: int
    started_at: int
    age_ms: int
    # The queues a worker consumes, as it recorded them when it started (none for beat).
    queues: tuple[str, ...] = ()
    # What the process says of itself: host, pid, gateway, activity, supervisor (pulse).
    details: dict[str, Any] | None = None


def _queues(details: object) -> tuple[str, ...]:
    queues = details.get("queues") if isinstance(details, dict) else None
    return tuple(str(q) for q in queues or ())


def heartbeats(now: int | None = None) -> list[HeartbeatView]:
    """Every recorded worker and beat, with how old its last heartbeat is (one query)."""
    now = timeutil.now_ms() if now is None else now
    return [
        HeartbeatView(
            kind,
            name,
            state,
            seen,
            started,
            max(0, now - seen),
            _queues(details),
            details if isinstance(details, dict) else {},
        )
        for kind, name, state, seen, started, details in Heartbeat.objects.order_by(
            "kind", "name"
        ).values_list("kind", "name", "state", "seen_at", "started_at", "details")
    ]


def latest_seen(kind: str, rows: list[HeartbeatView]) -> int | None:
    """The newest heartbeat of a running process of ``kind``, or None when there is none."""
    seen = [r.seen_at for r in rows if r.kind == kind and r.state == "running"]
    return max(seen) if seen else None
