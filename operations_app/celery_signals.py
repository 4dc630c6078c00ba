"""Celery signal receivers: task statistics, worker starts and stops, and beat ticks.

A worker's heartbeat is its own (``pulse``: a timer thread started when the worker is ready),
not Celery's ``heartbeat_sent``, which the embedded broker's SQL transport never sends.

Every receiver swallows its own errors: statistics must never fail or slow down the task or
the worker they describe. They write to the database so that every web process can read them.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any

from celery import signals
from django.db import IntegrityError, transaction
from django.db.models import F

from opensquilla_site import timeutil

from . import heartbeats, pulse
from .models import TaskStat

logger = logging.getLogger(__name__)

_started: dict[str, float] = {}
_started_lock = threading.Lock()
# Set in the beat process by ``beat_init``: its task publishes are its ticks.
_IS_BEAT = {"value": False}


def record_task_run(task: str, *, duration_ms: float, failed: bool, now: int | None = None) -> None:
    now = timeutil.now_ms() if now is None else now
    record_task_runs(
        task,
        runs=1,
        failures=int(failed),
        duration_ms=duration_ms,
        last_run_at=now,
        last_failure_at=now if failed else None,
    )


def record_task_runs(
    task: str,
    *,
    runs: int,
    failures: int,
    duration_ms: float,
    last_run_at: int,
    last_failure_at: int | None,
) -> None:
    """Add ``runs`` runs of ``task`` (``failures`` of them failed) to its statistics."""
    fields: dict[str, Any] = {
        "runs": F("runs") + runs,
        "duration_sum_ms": F("duration_sum_ms") + duration_ms,
        "last_run_at": last_run_at,
    }
    if failures:
        fields.update(failures=F("failures") + failures, last_failure_at=last_failure_at)
    if TaskStat.objects.filter(task=task).update(**fields):
        return
    try:
        with transaction.atomic():
            TaskStat.objects.create(
                task=task,
                runs=runs,
                failures=failures,
                duration_sum_ms=duration_ms,
                last_run_at=last_run_at,
                last_failure_at=last_failure_at if failures else None,
            )
    except IntegrityError:
        TaskStat.objects.filter(task=task).update(**fields)


@signals.task_prerun.connect
def _task_prerun(task_id: str | None = None, **_: Any) -> None:
    if task_id:
        with _started_lock:
            _started[task_id] = time.monotonic()


@signals.task_postrun.connect
def _task_postrun(
    task_id: str | None = None, task: Any = None, state: str | None = None, **_: Any
) -> None:
    with _started_lock:
        started = _started.pop(task_id or "", None)
    if task is None or started is None:
        return
    name = getattr(task, "name", str(task))
    duration_ms = (time.monotonic() - started) * 1000
    failed = state == "FAILURE"
    if getattr(getattr(task, "request", None), "is_eager", False):
        # In the caller's process and transaction (tests, CELERY_TASK_ALWAYS_EAGER): at once.
        _record_safely(name, duration_ms=duration_ms, failed=failed)
        return
    _task_stats.note(name, duration_ms=duration_ms, failed=failed)


def _record_safely(name: str, **run: Any) -> None:
    try:
        record_task_run(name, **run)
    except Exception:  # noqa: BLE001
        logger.warning("could not record the run of %s", name, exc_info=True)


class _TaskStatBuffer:
    """A worker process's task runs, written at most once per ``FLUSH_SECONDS`` (and when the
    process ends): one commit per task made the statistic cost more than a short task (one
    fsync each: a worker doing trivial tasks did ~40 a second instead of ~300)."""

    FLUSH_SECONDS = 1.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: list[tuple[str, float, bool, int]] = []
        self._timer: threading.Timer | None = None

    def note(self, name: str, *, duration_ms: float, failed: bool) -> None:
        with self._lock:
            self._runs.append((name, duration_ms, failed, timeutil.now_ms()))
            if self._timer is None:
                self._timer = threading.Timer(self.FLUSH_SECONDS, self._flush_from_timer)
                self._timer.daemon = True
                self._timer.start()

    def flush(self) -> None:
        with self._lock:
            runs, self._runs = self._runs, []
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        totals: dict[str, dict[str, Any]] = {}
        for name, duration_ms, failed, at in runs:
            total = totals.setdefault(
                name,
                {"runs": 0, "failures": 0, "duration_ms": 0.0, "last_run_at": at},
            )
            total["runs"] += 1
            total["duration_ms"] += duration_ms
            total["last_run_at"] = max(total["last_run_at"], at)
            if failed:
                total["failures"] += 1
                total["last_failure_at"] = at
        for name, total in totals.items():
            try:
                record_task_runs(name, last_failure_at=total.pop("last_failure_at", None), **total)
            except Exception:  # noqa: BLE001
                logger.warning("could not record the runs of %s", name, exc_info=True)

    def _flush_from_timer(self) -> None:
        from django.db import connections

        with self._lock:
            self._timer = None
        try:
            self.flush()
        finally:
            connections.close_all()  # this thread's connections only


_task_stats = _TaskStatBuffer()


@signals.worker_process_shutdown.connect
@signals.worker_shutdown.connect
def _flush_task_stats(**_: Any) -> None:
    """A worker process (a pool child, or a solo worker) ending writes what it still holds."""
    _task_stats.flush()


def _worker_name(sender: Any) -> str:
    for obj in (sender, getattr(sender, "eventer", None)):
        hostname = getattr(obj, "hostname", None)
        if isinstance(hostname, str) and hostname:
            return hostname
    return f"celery@{socket.gethostname()}.{os.getpid()}"


def _consumed_queues(sender: Any) -> list[str]:
    """The queues this worker consumes (``-Q``), as its consumer or its app knows them."""
    consumer = getattr(sender, "task_consumer", None)
    queues = getattr(consumer, "queues", None)
    names = [getattr(q, "name", "") for q in queues or ()]
    if not any(names):
        app = getattr(sender, "app", None)
        declared = getattr(getattr(app, "amqp", None), "queues", None)
        chosen = getattr(declared, "consume_from", None) or declared or {}
        names = list(chosen)
    return sorted({str(n) for n in names if n})


@signals.worker_ready.connect
def _worker_ready(sender: Any = None, **_: Any) -> None:
    from sessions_app.gateways import served_gateway

    try:
        # What it consumes and whose workspaces it was given: the liveness page and the
        # "no live worker" warnings read this row, never a broadcast to the workers.
        details = {"queues": _consumed_queues(sender), "gateway": served_gateway()}
        pulse.start_pulse("worker", _worker_name(sender), lambda: details)
    except Exception:  # noqa: BLE001
        logger.warning("could not record the worker start", exc_info=True)
    _start_beat_watch()


# Beat schedules the alert evaluation, so a dead beat could never alert about itself: each
# worker also evaluates the "no beat tick" rules on its own timer.
BEAT_WATCH_INTERVAL_S = 60.0
_beat_watch_started = threading.Event()


def _beat_watch_loop() -> None:
    from django.db import connections

    from .alerts.evaluate import evaluate_alerts
    from .models import AlertRule

    while True:
        time.sleep(BEAT_WATCH_INTERVAL_S)
        try:
            evaluate_alerts(conditions=[AlertRule.BEAT_SILENT])
        except Exception:  # noqa: BLE001
            logger.warning("beat watch evaluation failed", exc_info=True)
        finally:
            connections.close_all()


def _start_beat_watch() -> None:
    if _beat_watch_started.is_set():
        return
    _beat_watch_started.set()
    threading.Thread(target=_beat_watch_loop, name="beat-watch", daemon=True).start()


@signals.worker_shutdown.connect
def _worker_shutdown(sender: Any = None, **_: Any) -> None:
    try:
        pulse.stop_pulse("worker", _worker_name(sender))
    except Exception:  # noqa: BLE001
        logger.warning("could not record the worker shutdown", exc_info=True)


def beat_name() -> str:
    return f"beat@{socket.gethostname()}"


@signals.beat_init.connect
def _beat_init(sender: Any = None, **_: Any) -> None:
    _IS_BEAT["value"] = True
    try:
        heartbeats.mark_started("beat", beat_name(), pulse.process_facts())
    except Exception:  # noqa: BLE001
        logger.warning("could not record the beat start", exc_info=True)


@signals.before_task_publish.connect
def _beat_tick(sender: str | None = None, **_: Any) -> None:
    if not _IS_BEAT["value"]:
        return
    try:
        heartbeats.record_heartbeat(
            "beat", beat_name(), details={"last_task": sender or "", **pulse.process_facts()}
        )
    except Exception:  # noqa: BLE001
        logger.warning("could not record the beat tick", exc_info=True)
