"""Readiness probes: can this process reach the database and the broker right now?

Each probe runs in its own thread with a deadline, so a database or broker that hangs (rather
than refusing) still yields an answer within ``OPENSQUILLA_READYZ_TIMEOUT`` seconds. The thread
opens its own database connection, which also proves a *new* connection can be made.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings
from django.db import connections

from opensquilla_site import embedded_broker

logger = logging.getLogger(__name__)

# One shared pool: a hung probe occupies a thread until its own socket timeout fires, and the
# pool's size bounds how many such threads can pile up under repeated probing.
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="readyz")


@dataclass(frozen=True)
class ProbeResult:
    name: str
    ok: bool
    detail: str

    def to_dict(self) -> dict[str, object]:
        return {"ok": self.ok, "detail": self.detail}


def _timeout() -> float:
    return float(getattr(settings, "OPENSQUILLA_READYZ_TIMEOUT", 2.0))


def check_database() -> str:
    try:
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    finally:
        # This thread is about to return to the pool: never leave its connection open.
        connections["default"].close()
    return "reachable"


def check_broker(url: str | None = None, *, timeout: float | None = None) -> str:
    """Reach the Celery broker named by ``url`` (default: the configured one)."""
    url = url or settings.CELERY_BROKER_URL
    timeout = _timeout() if timeout is None else timeout
    scheme = urlsplit(url).scheme
    if scheme in ("redis", "rediss"):
        import redis

        client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
        try:
            client.ping()
        finally:
            client.close()
        return "redis answered PING"
    if embedded_broker.is_embedded(url):
        return embedded_broker.check(url)
    if scheme == "memory":
        return "in-process broker"
    from kombu import Connection

    with Connection(url, connect_timeout=timeout) as conn:
        conn.ensure_connection(max_retries=1, timeout=max(1, round(timeout)))
    return f"{scheme} broker accepted a connection"


def _run(name: str, probe: Callable[[], str]) -> ProbeResult:
    future = _POOL.submit(probe)
    try:
        return ProbeResult(name, True, future.result(timeout=_timeout()))
    except concurrent.futures.TimeoutError:
        return ProbeResult(name, False, f"no answer within {_timeout():g} s")
    except Exception as exc:  # noqa: BLE001 - any failure is "not ready", never a 500
        # The class name is enough for an operator; the message may carry a host or user.
        logger.warning("readiness probe %s failed: %s", name, type(exc).__name__)
        return ProbeResult(name, False, f"unreachable ({type(exc).__name__})")


def readiness() -> list[ProbeResult]:
    """Database and broker probes, run concurrently; each bounded by the timeout."""
    return [_run("database", check_database), _run("broker", check_broker)]
