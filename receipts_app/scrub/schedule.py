"""Queue scrubs to the workers that hold the files: beat's tick, and the on-demand request."""

from __future__ import annotations

from dataclasses import dataclass

from sessions_app.gateways import (
    DEFAULT_GATEWAY,
    Gateway,
    gateway_queue,
    known_gateway,
    live_queue_consumers,
    no_worker_warning_for,
)
from sessions_app.keys import normalize_agent_id

from .. import enqueue


def queue_scrubs() -> list[str]:
    """Queue every gateway's scrub (all agents) to its own worker: ``local``'s to the default
    queue, each other gateway's to ``gateway.NAME``. A gateway with no live worker on its queue
    gets none (nothing would run it), nor one whose last scrub still waits in the outbox, so a
    stopped worker never piles scrubs up. Returns the gateways queued."""
    names = list(Gateway.objects.values_list("name", flat=True)) or [DEFAULT_GATEWAY]
    if DEFAULT_GATEWAY not in names:
        names.append(DEFAULT_GATEWAY)
    consumers = live_queue_consumers()
    waiting = enqueue.outstanding_scrubs()
    queued = []
    for name in sorted(names):
        if (name, "") in waiting:
            continue
        queue = gateway_queue(name)
        if queue is not None and consumers is not None and not consumers.get(queue):
            continue
        enqueue.send(enqueue.scrub_message(name))
        queued.append(name)
    return queued


@dataclass(frozen=True)
class ScrubRequest:
    task_id: str
    gateway: str
    agent: str
    warning: str | None  # no worker serves the gateway's queue now


def request_scrub(gateway: str, agent: str | None = None, *, full: bool = False) -> ScrubRequest:
    """Verify ``gateway``'s checkpoints now (one agent's with ``agent``) on its own worker.
    ``GatewayNameError`` (a ``ValueError``) for a bad name, ``KeyError`` for an unknown one."""
    if gateway != DEFAULT_GATEWAY:
        known_gateway(gateway)
    agent_id = normalize_agent_id(agent) if agent else ""
    task_id = enqueue.send(
        enqueue.scrub_message(gateway, agent=agent_id, force=True, full=True if full else None)
    )
    return ScrubRequest(task_id, gateway, agent_id, no_worker_warning_for(gateway))
