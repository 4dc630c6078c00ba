"""Work waiting for a gateway is one message per piece of work, however long it waits.

Requeued checkpoints of a gateway whose queue no worker consumes wait in the broker (the
embedded default, or Redis in CI). Sweep after sweep, each hours apart in the sweep's clock,
neither the outbox nor the sweep of requeued rows adds a second copy or drops one; when a
worker for the gateway appears, each piece of work runs once.
"""

from __future__ import annotations

import logging

import pytest

from opensquilla_site import embedded_broker
from opensquilla_site.celery import app
from opensquilla_site.timeutil import now_ms
from receipts_app import task_limits
from receipts_app.audit import Actor
from receipts_app.models import MemoryDurableReceipt, OutboxMessage, ReceiptEvent
from receipts_app.requeue import requeue_receipt, sweep_lost_work
from sessions_app.gateways import ensure_gateway, using_gateway
from tests.factories import make_receipt, make_session
from tests.worker.conftest import BROKER_IS_REDIS, BROKER_URL, service_marks, wait_for

pytestmark = [*service_marks(), pytest.mark.django_db(transaction=True)]

GATEWAY = "gw-wait"
WORK = 4
SWEEPS = 8
# Longer than every task's hard limit plus the margin and than the lost-checkpoint age: each
# sweep finds every waiting message old enough to be sent again, were it not still waiting.
SWEEP_STEP_MS = 2 * (task_limits.LONGEST_HARD_SECONDS + task_limits.MARGIN_SECONDS) * 1000


def _in_broker(queue: str) -> int:
    """Messages the broker holds for ``queue`` (waiting, or delivered and unacknowledged)."""
    if not BROKER_IS_REDIS:
        return embedded_broker.queue_depths(BROKER_URL).get(queue, 0)
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        client = channel.client
        waiting = sum(
            client.llen(channel._q_for_pri(queue, priority)) for priority in channel.priority_steps
        )
        unacked = sum(
            1 for _tag, raw in client.hscan_iter(channel.unacked_key) if queue.encode() in raw
        )
        return waiting + unacked


def _requeued_work() -> list[str]:
    ensure_gateway(GATEWAY)
    failed = []
    with using_gateway(GATEWAY):
        for index in range(WORK):
            session = make_session(f"agent:main:webchat:waiting-{index}", messages=2)
            failed.append(
                make_receipt(
                    session_key=session.session_key,
                    session_id=session.session_id,
                    status="checkpoint_failed",
                    reason="workspace missing",
                )
            )
    for row in failed:
        result = requeue_receipt(receipt_id=row.receipt_id, actor=Actor("alice", "console"))
        assert str(result.outcome) == "requeued", result
    return [row.receipt_id for row in failed]


def test_waiting_work_stays_one_message_each_and_runs_once_when_a_worker_comes(
    start_worker, celery_queue, shared_workspaces, settings, caplog
):
    prefix = f"{celery_queue}.gateway."
    settings.OPENSQUILLA_GATEWAY_QUEUE_PREFIX = prefix
    queue = prefix + GATEWAY
    requeued = _requeued_work()
    assert _in_broker(queue) == WORK
    sent = set(OutboxMessage.objects.values_list("task_id", flat=True))
    assert len(sent) == WORK

    now = now_ms()
    with caplog.at_level(logging.WARNING, logger="receipts_app"):
        for _sweep in range(SWEEPS):
            now += SWEEP_STEP_MS
            swept = sweep_lost_work(now)
            assert swept["outbox_resent"] == [] and swept["checkpoints_resent"] == []
            assert _in_broker(queue) == WORK
    # Nothing sent twice, nothing given up: the outbox still holds each message, sent once.
    assert set(OutboxMessage.objects.values_list("task_id", flat=True)) == sent
    assert set(OutboxMessage.objects.values_list("sends", flat=True)) == {1}
    assert not [r for r in caplog.records if "dropped" in r.getMessage()]

    worker = start_worker(
        queues=queue, OPENSQUILLA_GATEWAY=GATEWAY, OPENSQUILLA_GATEWAY_QUEUE_PREFIX=prefix
    )
    wait_for(
        lambda: (
            MemoryDurableReceipt.objects.filter(
                receipt_id__in=requeued, status="checkpoint_recovered"
            ).count()
            == WORK
        ),
        what="every requeued checkpoint recovered",
    )
    wait_for(lambda: not OutboxMessage.objects.exists(), what="the outbox to empty")
    assert _in_broker(queue) == 0
    # Each piece of work ran once: one task run and one new checkpoint per session.
    runs = [
        line
        for line in worker.log().splitlines()
        if "receipts_app.tasks.checkpoint_session[" in line and "succeeded" in line
    ]
    assert len(runs) == WORK, worker.log()[-3000:]
    with using_gateway(GATEWAY):
        saved = MemoryDurableReceipt.objects.filter(status="checkpoint_saved")
        assert sorted(saved.values_list("session_key", flat=True)) == sorted(
            f"agent:main:webchat:waiting-{index}" for index in range(WORK)
        )
    assert not ReceiptEvent.objects.filter(action="requeue_resent").exists()
