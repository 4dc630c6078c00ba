"""Send work to the Celery workers, after the surrounding transaction commits.

The one door to the broker for the services and the requeue engine. It knows the workers'
tasks by their registered names (``TASKS``; ``tasks.py`` registers each under exactly that
name) and never imports ``tasks.py``: the tasks call down into the services, and the
services send work through here, so nothing calls back up.

The task id is chosen up front so the caller can return it (and record it in the audit event)
before the broker ever sees the message.

Work accepted is work done: every message is first written to the outbox
(``OutboxMessage``) in the caller's own transaction, so whatever answers 202 is in the
database before it answers, and it is published only after that commit. The worker deletes
the row when the task ends (``task_ended``). Whatever stays is sent again by
``resend_lost`` (run by every ``repair_tick`` through ``requeue.sweep_lost_work``): at once
when its publish failed (the broker was down; a publish gives up within about a second,
settings' publish policy), and once it is older than its task's hard time limit plus a margin
when it was sent but never finished (a worker killed mid-task, a web process killed between
commit and publish), but never while the broker still holds it
(``opensquilla_site.broker_contents``): work waiting for a worker, however long, is one
message in its queue, looked at again once per hard limit. Re-sending is safe: every task is
idempotent. A message sent ``MAX_SENDS`` times and lost each time without finishing is
dropped with an error in the log.

Work runs where its gateway lives (docs/WORKERS.md, "Where work runs"): a message for a
gateway's rows names the gateway (``gateway=<name>`` in its kwargs, left out for ``local``), and
this module routes it, here and nowhere else, to that gateway's queue
(``sessions_app.gateways.gateway_queue``: ``gateway.<name>``); ``local``'s messages and the
central tasks (the repair tick, the plan runner) keep the default queue. The outbox row
remembers the queue, so a resend goes where the first send went.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.db.models.fields.json import KT

from opensquilla_site import broker_contents
from opensquilla_site.celery import app
from opensquilla_site.timeutil import now_ms
from sessions_app.gateways import DEFAULT_GATEWAY, current_gateway, gateway_queue

from . import task_limits
from .models import OutboxMessage

logger = logging.getLogger(__name__)

# The workers' tasks, by the short name every message uses; ``task_name`` gives the
# registered name.
CHECKPOINT_SESSION = "checkpoint_session"
FLUSH_SESSION = "flush_session"
REPAIR_RECEIPT = "repair_receipt"
REPAIR_TICK = "repair_tick"
RUN_REQUEUE_PLAN = "run_requeue_plan"
SCRUB_CHECKPOINTS = "scrub_checkpoints"
TASKS = (
    CHECKPOINT_SESSION,
    FLUSH_SESSION,
    REPAIR_RECEIPT,
    REPAIR_TICK,
    RUN_REQUEUE_PLAN,
    SCRUB_CHECKPOINTS,
)
_TASK_MODULE = "receipts_app.tasks"
# Each task's time limits (task_limits.py): a message sent longer ago than its hard limit plus
# the margin, and still in the outbox, lost its task. With a repair tick every minute the work
# runs again within twice the hard limit.
LIMITS = {
    CHECKPOINT_SESSION: task_limits.CHECKPOINT,
    FLUSH_SESSION: task_limits.FLUSH,
    REPAIR_RECEIPT: task_limits.REPAIR_RECEIPT,
    REPAIR_TICK: task_limits.REPAIR_TICK,
    RUN_REQUEUE_PLAN: task_limits.PLAN,
    SCRUB_CHECKPOINTS: task_limits.SCRUB,
}
MAX_SENDS = 5
RESEND_LIMIT = 500

# ``(short task name, args, kwargs)``: one message, not yet sent.
Message = tuple[str, tuple[Any, ...], dict[str, Any]]

# Set while ``_send_all`` publishes a batch: one producer, one Redis pipeline for all of it.
_PRODUCER: ContextVar[Any] = ContextVar("enqueue_producer", default=None)


def task_name(short_name: str) -> str:
    """The name the task is registered under (and that the worker logs)."""
    return f"{_TASK_MODULE}.{short_name}"


def queue_for(kwargs: dict[str, Any]) -> str:
    """The queue a message goes to: its gateway's (``gateway`` in its kwargs), or "" for the
    default queue (``local``'s rows and the central tasks)."""
    return gateway_queue(kwargs.get("gateway")) or ""


def _send(
    short_name: str, task_id: str, args: tuple[Any, ...], kwargs: dict[str, Any], *, queue: str = ""
) -> None:
    # Celery's registry (filled by autodiscovery) finds the task; eager mode still applies.
    task = app.tasks[task_name(short_name)]
    producer = _PRODUCER.get()
    # A gateway's queue is named outright (it wins over any configured route); "" keeps the
    # task's default routing.
    routing: dict[str, Any] = {"queue": queue} if queue else {}
    # Every send is fire-and-forget: nothing waits on a result (the outbox and the ledger say
    # what happened), so the producer never subscribes to the task's result channel: one
    # Redis round trip less, and no result-store reconnect loop when Redis is down.
    if producer is None:
        task.apply_async(args=args, kwargs=kwargs, task_id=task_id, ignore_result=True, **routing)
        return
    # Batch reprs are plain ``repr``s.
    # (``argsrepr``/``kwargsrepr`` are message options celery-types does not list.)
    options: dict[str, Any] = {
        "argsrepr": repr(args)[:1024],
        "kwargsrepr": repr(kwargs)[:1024],
        **routing,
    }
    task.apply_async(
        args=args, kwargs=kwargs, task_id=task_id, producer=producer, ignore_result=True, **options
    )


def _send_to(
    short_name: str, task_id: str, args: tuple[Any, ...], kwargs: dict[str, Any], queue: str
) -> None:
    # The default queue is not named, so a default-routed send is the plain call.
    if queue:
        _send(short_name, task_id, args, kwargs, queue=queue)
    else:
        _send(short_name, task_id, args, kwargs)


def _send_all(batch: Sequence[tuple[str, str, tuple[Any, ...], dict[str, Any]]]) -> None:
    """Publish many messages through one producer; kombu pipelines them on Redis.

    Each message fails alone (logged, marked unsent in the outbox), like the
    one-callback-per-message path: the rows are committed either way.
    """
    failed: list[str] = []
    try:
        with app.producer_or_acquire() as producer, producer.batch():
            token = _PRODUCER.set(producer)
            try:
                for short_name, task_id, args, kwargs in batch:
                    try:
                        _send_to(short_name, task_id, args, kwargs, queue_for(kwargs))
                    except Exception:
                        logger.exception("could not enqueue %s as %s", short_name, task_id)
                        failed.append(task_id)
            finally:
                _PRODUCER.reset(token)
    except Exception:
        logger.exception("could not publish a batch of %d messages", len(batch))
        failed = [task_id for _name, task_id, _args, _kwargs in batch]
    _mark_unsent(failed)


def _publish(
    short_name: str, task_id: str, args: tuple[Any, ...], kwargs: dict[str, Any], queue: str
) -> None:
    try:
        _send_to(short_name, task_id, args, kwargs, queue)
    except Exception:
        logger.exception(
            "could not enqueue %s as %s; the outbox keeps it for the sweep", short_name, task_id
        )
        _mark_unsent([task_id])


def _mark_unsent(task_ids: list[str]) -> None:
    """The broker did not take these: the next sweep sends them (no need to wait them out)."""
    if not task_ids:
        return
    try:
        OutboxMessage.objects.filter(task_id__in=task_ids).update(sent_at=None)
    except Exception:  # noqa: BLE001 - they are still in the outbox, sent once their time is up
        logger.exception("could not mark %d unsent messages", len(task_ids))


def _outbox_row(short_name: str, task_id: str, args: tuple[Any, ...], kwargs: dict[str, Any]):
    now = now_ms()
    return OutboxMessage(
        task_id=task_id,
        task=short_name,
        args=list(args),
        kwargs=kwargs,
        queue=queue_for(kwargs),
        created_at=now,
        sent_at=now,
    )


def send(message: Message) -> str:
    """Record one message in the outbox now and send it once the transaction commits;
    returns its task id."""
    short_name, args, kwargs = message
    task_id = str(uuid.uuid4())
    _outbox_row(short_name, task_id, args, kwargs).save(force_insert=True)

    queue = queue_for(kwargs)

    def after_commit() -> None:
        _publish(short_name, task_id, args, kwargs, queue)

    transaction.on_commit(after_commit, robust=True)
    logger.debug("queued %s(%s) as %s after commit", short_name, args, task_id)
    return task_id


def send_many(messages: Sequence[Message]) -> list[str]:
    """Record many messages in the outbox and send them after commit through one producer;
    returns their task ids."""
    batch = [(name, str(uuid.uuid4()), args, kwargs) for name, args, kwargs in messages]
    if batch:
        OutboxMessage.objects.bulk_create([_outbox_row(*message) for message in batch])
        transaction.on_commit(lambda: _send_all(batch), robust=True)
    return [task_id for _name, task_id, _args, _kwargs in batch]


def task_ended(task_id: str, short_name: str, *, retrying: bool = False) -> None:
    """A task finished (done or failed for good): its work is no longer the outbox's.

    Called by the worker for every task; a task that will retry keeps its row, so a retry
    message lost with the broker is sent again too.
    """
    if retrying or short_name not in LIMITS:
        return
    OutboxMessage.objects.filter(task_id=task_id).delete()


def resend_lost(now: int | None = None) -> list[str]:
    """Send again every outbox message whose publish failed or whose task outlived its hard
    limit plus the margin without finishing, unless the broker still holds it; returns their
    task ids."""
    now = now_ms() if now is None else now
    due = Q(sent_at__isnull=True)
    for short_name, limit in LIMITS.items():
        cutoff = now - (limit.hard + task_limits.MARGIN_SECONDS) * 1000
        due |= Q(task=short_name, sent_at__lte=cutoff)
    stranded = list(
        OutboxMessage.objects.filter(due)
        .order_by("created_at", "task_id")
        .values_list("task_id", "task", "args", "kwargs", "queue", "sent_at", "sends")[
            :RESEND_LIMIT
        ]
    )
    if not stranded:
        return []
    queues = {queue or queue_for(kwargs) for _id, _t, _a, kwargs, queue, _s, _n in stranded}
    try:
        held = broker_contents.held_task_ids(app, queues, {row[0] for row in stranded})
    except Exception:  # noqa: BLE001 - a broker that cannot be read cannot be sent to either
        logger.warning("the broker could not be read; the outbox sends nothing this time")
        return []
    resent: list[str] = []
    for task_id, short_name, args, kwargs, queue, sent_at, sends in stranded:
        rows = OutboxMessage.objects.filter(task_id=task_id, sent_at=sent_at, sends=sends)
        if held is not None and task_id in held:
            # Still waiting for a worker (or, on Redis, delivered and due back by itself):
            # a second copy would only lengthen the queue. Looked at again after its limit.
            rows.update(sent_at=now)
            continue
        if sends >= MAX_SENDS:
            if rows.delete()[0]:
                logger.error(
                    "%s %s(%s) sent %d times, each time lost without finishing: dropped "
                    "from the outbox",
                    short_name,
                    task_id,
                    args,
                    sends,
                )
            continue
        # The conditional UPDATE claims it: overlapping sweeps send it once.
        if not rows.update(sent_at=now, sends=sends + 1):
            continue
        logger.warning(
            "sending %s %s again (send %d): its work was not done", short_name, task_id, sends + 1
        )
        # The queue of the first send; a row written before queues were kept has "" and
        # finds its gateway's queue from its kwargs.
        _publish(short_name, task_id, tuple(args), dict(kwargs), queue or queue_for(kwargs))
        resent.append(task_id)
    return resent


def outstanding_requeues() -> Any:
    """The receipt ids whose requeued checkpoint is still in the outbox (sent, not finished),
    as a subquery: the lost-work sweep sends no second message for them."""
    return (
        OutboxMessage.objects.filter(task=CHECKPOINT_SESSION)
        .annotate(requeue_of=KT("kwargs__requeue_of"))
        .filter(requeue_of__isnull=False)
        .values("requeue_of")
    )


def outstanding_plan_runs() -> Any:
    """The plan ids with a runner still in the outbox, as a subquery."""
    return (
        OutboxMessage.objects.filter(task=RUN_REQUEUE_PLAN)
        .annotate(plan_id=KT("args__0"))
        .values("plan_id")
    )


# --- the messages ----------------------------------------------------------------------------


def _gateway_kwargs(gateway: str | None) -> dict[str, str]:
    """The session's gateway (default: the current one), named only when it is not ``local``,
    so a single-gateway deployment's messages read exactly as before."""
    name = gateway or current_gateway()
    return {} if name == DEFAULT_GATEWAY else {"gateway": name}


def checkpoint_message(
    session_key: str,
    *,
    turn_id: str | None = None,
    requeue_of: str | None = None,
    source: str,
    gateway: str | None = None,
) -> Message:
    """Take a checkpoint of the live transcript; with ``requeue_of``, retake that failed one."""
    kwargs = {"turn_id": turn_id, "requeue_of": requeue_of, "source": source}
    return (CHECKPOINT_SESSION, (session_key,), {**kwargs, **_gateway_kwargs(gateway)})


def flush_message(
    session_key: str, *, turn_id: str | None = None, gateway: str | None = None
) -> Message:
    return (FLUSH_SESSION, (session_key,), {"turn_id": turn_id, **_gateway_kwargs(gateway)})


def repair_message(receipt_id: str, *, gateway: str | None = None) -> Message:
    """Repair one row now; ``gateway`` is the row's (default: the current one)."""
    return (REPAIR_RECEIPT, (receipt_id,), _gateway_kwargs(gateway))


def repair_tick_message(gateway: str) -> Message:
    """The repair pass of one gateway's rows and workspaces, run by that gateway's worker."""
    return (REPAIR_TICK, (), _gateway_kwargs(gateway))


def outstanding_gateway_ticks() -> set[str]:
    """Gateways whose repair tick is still in the outbox (sent, not yet finished): the
    central tick queues no second one while one waits."""
    return {
        str(kwargs.get("gateway"))
        for kwargs in OutboxMessage.objects.filter(task=REPAIR_TICK)
        .exclude(queue="")
        .values_list("kwargs", flat=True)
        if isinstance(kwargs, dict) and kwargs.get("gateway")
    }


def scrub_message(
    gateway: str, *, agent: str | None = None, force: bool = False, full: bool | None = None
) -> Message:
    """Verify gateway ``gateway``'s checkpoint files (one agent's, with ``agent``) on the worker
    that holds them; ``force``: now, even when no cycle is due."""
    kwargs: dict[str, Any] = {"agent": agent or "", "force": force, "full": full}
    return (SCRUB_CHECKPOINTS, (), {**kwargs, **_gateway_kwargs(gateway)})


def outstanding_scrubs() -> set[tuple[str, str]]:
    """(gateway, agent) of the scrubs still in the outbox: beat queues no second one."""
    out: set[tuple[str, str]] = set()
    for kwargs in OutboxMessage.objects.filter(task=SCRUB_CHECKPOINTS).values_list(
        "kwargs", flat=True
    ):
        if isinstance(kwargs, dict):
            out.add((str(kwargs.get("gateway") or DEFAULT_GATEWAY), str(kwargs.get("agent") or "")))
    return out


def plan_runner_message(plan_id: str, *, fan_out: bool = True) -> Message:
    """Run a requeue plan's batches; only the first runner of a plan may add more runners."""
    kwargs = {} if fan_out else {"fan_out": False}
    return (RUN_REQUEUE_PLAN, (plan_id,), kwargs)
