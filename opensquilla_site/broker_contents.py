"""Which messages the broker still holds: the outbox asks before it sends anything again.

A message the broker holds (waiting in its queue, or on Redis delivered and not yet
acknowledged, which Redis itself hands out again after its visibility timeout) will reach a
worker; sending a second copy only adds to the queue. So ``receipts_app.enqueue.resend_lost``
sends again only what the broker no longer holds: a publish that failed, a message the
embedded broker delivered to a worker killed mid-task, a web process killed between commit
and publish.

``held_task_ids`` reads the queues by name (a gateway's ``gateway.<name>``; "" is Celery's
default queue) and answers with the task ids among ``wanted`` it found. Two brokers can be read:
the embedded SQLite file (its waiting rows) and Redis (each queue's lists, one per priority
step, and kombu's ``unacked`` hash). Any other broker (RabbitMQ) cannot be listed without
taking the messages: the answer is ``None`` and the outbox sends again by age alone, as the
docs say (docs/WORKERS.md, "Work that waits").
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from . import embedded_broker

# Messages read from Redis per round trip.
CHUNK = 1000


def held_task_ids(app: Any, queues: Iterable[str], wanted: set[str]) -> set[str] | None:
    """The task ids among ``wanted`` that the broker still holds in ``queues``; ``None`` when
    this broker cannot be read. Raises when the broker is unreachable."""
    if not wanted:
        return set()
    names = sorted({queue or str(app.conf.task_default_queue) for queue in queues})
    url = str(app.conf.broker_url or "")
    if embedded_broker.is_embedded(url):
        return embedded_broker.waiting_task_ids(url, names) & wanted
    with app.connection_for_write() as connection:
        if connection.transport.driver_type != "redis":
            return None
        return _redis_held(connection.default_channel, names, wanted)


def _task_id(raw: bytes | str) -> str | None:
    try:
        message = json.loads(raw)
    except ValueError:
        return None
    if isinstance(message, list):  # the unacked hash keeps [message, exchange, routing key]
        message = message[0] if message else {}
    if not isinstance(message, dict):
        return None
    headers = message.get("headers") or {}
    properties = message.get("properties") or {}
    found = headers.get("id") or properties.get("correlation_id")
    return str(found) if found else None


def _redis_held(channel: Any, queues: list[str], wanted: set[str]) -> set[str]:
    client = channel.client
    found: set[str | None] = set()
    for queue in queues:
        for priority in channel.priority_steps:
            key = channel._q_for_pri(queue, priority)
            # From the head (the newest end): a worker taking from the tail while this reads
            # cannot shift a message past the next chunk, a publish only shows one twice.
            start = 0
            while not wanted.issubset(found):
                chunk = client.lrange(key, start, start + CHUNK - 1)
                found.update(_task_id(raw) for raw in chunk)
                if len(chunk) < CHUNK:
                    break
                start += CHUNK
    # Delivered, not acknowledged: kombu restores these to their queue when unacknowledged for
    # longer than the visibility timeout (a worker killed mid-task), so they are still held.
    if not wanted.issubset(found):
        for _tag, raw in client.hscan_iter(channel.unacked_key, count=CHUNK):
            found.add(_task_id(raw))
    return {task_id for task_id in found if task_id is not None and task_id in wanted}
