"""How many messages wait in each Celery queue, read from the broker itself.

Redis: kombu keeps a queue as a list named after it (plus one list per priority step);
the filesystem transport keeps one file per message, named ``<ms>_<uuid>.<queue>.msg``.
Other brokers report nothing here (depth unknown), rather than guess.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings

from opensquilla_site import timeutil

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


def _queue_names() -> list[str]:
    names = {getattr(settings, "CELERY_TASK_DEFAULT_QUEUE", DEFAULT_QUEUE)}
    for route in (getattr(settings, "CELERY_TASK_ROUTES", None) or {}).values():
        if isinstance(route, dict) and route.get("queue"):
            names.add(str(route["queue"]))
    return sorted(names)


def _redis_depths(url: str, now: int) -> list[QueueDepth]:
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
    try:
        found = set(_queue_names())
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


def _filesystem_depths(now: int) -> list[QueueDepth]:
    folder = Path(str(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"]))
    counts = dict.fromkeys(_queue_names(), 0)
    with os.scandir(folder) as entries:
        for entry in entries:
            queue_part = entry.name.partition(".")[2]
            if queue_part.endswith(".msg"):
                queue = queue_part[: -len(".msg")]
                counts[queue] = counts.get(queue, 0) + 1
    return [QueueDepth(name, n, "filesystem", now) for name, n in sorted(counts.items())]


def queue_depths() -> list[QueueDepth]:
    """Depth of every known queue (the default one, the routed ones, any found on disk)."""
    url = settings.CELERY_BROKER_URL
    scheme = urlsplit(url).scheme
    now = timeutil.now_ms()
    try:
        if scheme in ("redis", "rediss"):
            return _redis_depths(url, now)
        if scheme == "filesystem":
            return _filesystem_depths(now)
    except Exception as exc:  # noqa: BLE001 - the page shows "unreadable", never a 500
        logger.warning("could not read queue depths: %s", type(exc).__name__)
        return [QueueDepth(q, None, scheme, now, type(exc).__name__) for q in _queue_names()]
    return [
        QueueDepth(q, None, scheme, now, "depth not readable on this broker")
        for q in _queue_names()
    ]
