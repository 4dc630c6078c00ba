"""Work accepted is work done: the outbox keeps every message until its task ends.

Each message sent through ``receipts_app.enqueue`` is written in the caller's transaction (so
before a 202), and the lost-work sweep sends again whatever a down broker or a killed worker
lost. Tasks run eagerly here; the real-worker version is in tests/worker/.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from kombu.exceptions import OperationalError as BrokerDown

from opensquilla_site.celery import app as celery_app
from opensquilla_site.timeutil import now_ms
from receipts_app import enqueue, services, task_limits
from receipts_app.audit import Actor
from receipts_app.models import MemoryDurableReceipt, OutboxMessage
from receipts_app.requeue import sweep_lost_work
from tests.factories import make_session

pytestmark = pytest.mark.django_db

ALICE = Actor("alice", "api")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def eager(settings, monkeypatch, workspace):
    settings.CELERY_TASK_ALWAYS_EAGER = True
    monkeypatch.setitem(celery_app.conf, "task_always_eager", True)
    monkeypatch.setitem(celery_app.conf, "task_eager_propagates", True)


def _saved(session_key: str) -> list[MemoryDurableReceipt]:
    return list(
        MemoryDurableReceipt.objects.filter(session_key=session_key, status="checkpoint_saved")
    )


def test_a_checkpoint_accepted_while_the_broker_is_down_runs_at_the_next_sweep(
    monkeypatch, django_capture_on_commit_callbacks
):
    session = make_session(messages=2)
    real_send = enqueue._send

    def broker_down(*_args):
        raise BrokerDown("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(enqueue, "_send", broker_down)
    with django_capture_on_commit_callbacks(execute=True):
        task_id = services.queue_checkpoint(session_key=session.session_key, actor=ALICE)

    # What answered 202 is in the database; its publish failed, so it is due at once.
    kept = OutboxMessage.objects.get(task_id=task_id)
    assert (kept.task, kept.args, kept.sent_at) == (
        "checkpoint_session",
        [session.session_key],
        None,
    )
    assert _saved(session.session_key) == []

    monkeypatch.setattr(enqueue, "_send", real_send)  # the broker is back
    swept = sweep_lost_work(now_ms())
    assert swept["outbox_resent"] == [task_id]
    assert len(_saved(session.session_key)) == 1
    assert not OutboxMessage.objects.exists()  # done: nothing left to send
    assert sweep_lost_work(now_ms())["outbox_resent"] == []


def test_work_a_killed_worker_lost_is_sent_again_after_its_hard_limit_and_margin(
    monkeypatch, django_capture_on_commit_callbacks
):
    session = make_session(messages=2)
    real_send = enqueue._send
    published: list[str] = []
    # The broker takes the message, and the worker that fetched it is killed before the end.
    monkeypatch.setattr(enqueue, "_send", lambda _name, task_id, *_a: published.append(task_id))
    with django_capture_on_commit_callbacks(execute=True):
        task_id = services.queue_flush(session_key=session.session_key, actor=ALICE)
    assert published == [task_id]
    sent_at = OutboxMessage.objects.get(task_id=task_id).sent_at
    assert sent_at is not None

    # Still within the flush's hard limit plus the margin: it may still be running.
    lost_after_ms = (task_limits.FLUSH.hard + task_limits.MARGIN_SECONDS) * 1000
    assert lost_after_ms < 2 * task_limits.FLUSH.hard * 1000
    assert sweep_lost_work(sent_at + lost_after_ms - 1000)["outbox_resent"] == []

    monkeypatch.setattr(enqueue, "_send", real_send)
    assert sweep_lost_work(sent_at + lost_after_ms)["outbox_resent"] == [task_id]
    assert MemoryDurableReceipt.objects.filter(session_key=session.session_key).exists()
    assert not OutboxMessage.objects.exists()


def test_a_message_that_never_finishes_is_dropped_after_its_last_send(
    monkeypatch, django_capture_on_commit_callbacks
):
    session = make_session(messages=2)
    monkeypatch.setattr(enqueue, "_send", lambda *_a: None)  # every worker that takes it dies
    with django_capture_on_commit_callbacks(execute=True):
        task_id = services.queue_checkpoint(session_key=session.session_key, actor=ALICE)
    step_ms = (task_limits.CHECKPOINT.hard + task_limits.MARGIN_SECONDS) * 1000
    now = now_ms()
    resends = 0
    for _ in range(enqueue.MAX_SENDS + 2):
        now += step_ms
        resends += len(sweep_lost_work(now)["outbox_resent"])
    assert resends == enqueue.MAX_SENDS - 1  # sent MAX_SENDS times in all, then given up
    assert not OutboxMessage.objects.filter(task_id=task_id).exists()


PUBLISH = """
import time
import django
django.setup()
from receipts_app import enqueue
started = time.monotonic()
try:
    enqueue._send("repair_receipt", "probe-task", ("r-1",), {})
except Exception as exc:
    print("failed", type(exc).__name__, round(time.monotonic() - started, 1))
"""


def test_a_publish_to_a_broker_that_never_answers_fails_instead_of_hanging():
    # A Redis that accepts the connection and then says nothing (a hung or half-open broker).
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "DJANGO_SETTINGS_MODULE": "opensquilla_site.settings",
        "OPENSQUILLA_ENV_FILE": "",
        "CELERY_BROKER_URL": f"redis://127.0.0.1:{silent.getsockname()[1]}/0",
    }
    env.pop("CELERY_TASK_ALWAYS_EAGER", None)
    try:
        # Celery's defaults wait here as long as the broker stays silent (forever); the
        # publish policy gives up (within about a second: docs/API.md).
        done = subprocess.run(
            [sys.executable, "-c", PUBLISH],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        silent.close()
    assert done.stdout.startswith("failed OperationalError"), done.stderr[-2000:]
