"""How many messages wait in each Celery queue, read from the broker itself.

Redis: kombu keeps a queue as a list named after it (plus one list per priority step);
the embedded broker keeps one row per message in its SQLite file (``embedded_broker``).
Other brokers report nothing here (depth unknown), rather than guess.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

from opensquilla_site import embedded_broker, timeutil

logger = logging.getLogger(__name__)

DEFAULT_QUEUE = "celery"
# kombu's Redis transport: priority steps 0, 3, 6, 9; step 0 is the queue's own name.
_REDIS_PRIORITY_SEP = "\x06\x16"
_REDIS_PRIORITY_STEPS = (3, 6, 9)


@dataclass(frozen=True)
class QueueDepth:
    queue: str
    depth: int | None  # None: the broker could not be read
    broker: str
    measured_at: int
    error: str = ""


def default_queue() -> str:
    return str(getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", None) or DEFAULT_QUEUE)


def _queue_names(gateways: Iterable[str] | None = None) -> list[str]:
    from sessions_app.gateways import Gateway, gateway_queue

    names = {default_queue()}
    # Every gateway's own queue (``gateway.<name>``), so its backlog shows while no one runs it.
    try:
        if gateways is None:
            gateways = Gateway.objects.values_list("name", flat=True)
        names.update(q for q in map(gateway_queue, gateways) if q)
    except Exception:  # noqa: BLE001 - the page shows the other queues
        logger.warning("could not list the gateways' queues", exc_info=True)
    for route in (getattr(settings, "CELERY_TASK_ROUTES", None) or {}).values():
        if isinstance(route, dict) and route.get("queue"):
            names.add(str(route["queue"]))
    return sorted(names)


def _redis_depths(url: str, now: int, known: list[str]) -> list[QueueDepth]:
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
    try:
        found = set(known)
        pipe = client.pipeline(transaction=False)
        names = sorted(found)
        for name in names:
            pipe.llen(name)
            for step in _REDIS_PRIORITY_STEPS:
                pipe.llen(f"{name}{_REDIS_PRIORITY_SEP}{step}")
        lengths = pipe.execute()
    finally:
        client.close()
    per = 1 + len(_REDIS_PRIORITY_STEPS)
    return [
        QueueDepth(name, sum(lengths[i * per : (i + 1) * per]), "redis", now)
        for i, name in enumerate(names)
    ]


def _embedded_depths(url: str, now: int, known: list[str]) -> list[QueueDepth]:
    counts = dict.fromkeys(known, 0)
    try:
        counts.update(embedded_broker.queue_depths(url))
    except FileNotFoundError:
        pass  # recreated, empty, on the next publish
    return [QueueDepth(name, n, "sqlite", now) for name, n in sorted(counts.items())]


def queue_depths(*, gateways: Iterable[str] | None = None) -> list[QueueDepth]:
    """Depth of every known queue (the default one, the routed ones, each gateway's, any found
    on disk); ``gateways``: the gateways whose queues to read (default: every known one)."""
    url = settings.CELERY_BROKER_URL
    scheme = urlsplit(url).scheme
    now = timeutil.now_ms()
    known = _queue_names(gateways)
    try:
        if scheme in ("redis", "rediss"):
            return _redis_depths(url, now, known)
        if embedded_broker.is_embedded(url):
            return _embedded_depths(url, now, known)
    except Exception as exc:  # noqa: BLE001 - the page shows "unreadable", never a 500
        logger.warning("could not read queue depths: %s", type(exc).__name__)
        return [QueueDepth(q, None, scheme, now, type(exc).__name__) for q in known]
    return [QueueDepth(q, None, scheme, now, "depth not readable on this broker") for q in known]
