"""A busy worker reads alive on the embedded default: its heartbeat is its own.

Celery sends no events over SQL transports (the embedded broker), so a heartbeat taken from
``heartbeat_sent`` left a working worker "silent" a minute after its start. The worker here
runs ``--pool=solo`` and ``--without-heartbeat``: while its one thread is held by a task for
four times the silence threshold, only its own heartbeat thread can keep it alive on the page.
"""

from __future__ import annotations

import time

import pytest
from django.test import Client

from operations_app.models import Heartbeat
from tests.factories import make_user
from tests.worker.celery_app import busy
from tests.worker.conftest import service_marks, wait_for

pytestmark = [*service_marks(), pytest.mark.django_db(transaction=True)]
STALE_S = 2


def test_a_busy_worker_reads_alive_for_longer_than_the_silence_threshold(
    start_worker, celery_queue, settings, tmp_path
):
    settings.OPENSQUILLA_HEARTBEAT_STALE_SECONDS = STALE_S
    make_user("lena", "viewer")
    viewer = Client()
    viewer.login(username="lena", password="pw-Secret-123")
    start_worker(OPENSQUILLA_HEARTBEAT_INTERVAL_SECONDS="0.5")
    row = wait_for(
        lambda: Heartbeat.objects.filter(kind="worker", name__startswith=celery_queue).first(),
        what="the worker's start to be recorded",
    )
    marker = tmp_path / "busy"
    busy.delay(4 * STALE_S, str(marker))
    wait_for(marker.exists, what="the worker to take the task")
    pages = []
    while marker.read_text(encoding="utf-8") != "done":
        pages.append(viewer.get("/operations/liveness/").content.decode())
        time.sleep(0.3)
    assert pages, "the liveness page was read while the worker was busy"
    for html in pages:
        assert "1 alive" in html and "of 1 known" in html
    row.refresh_from_db()
    # Its heartbeat moved on while its only thread ran the task (past the threshold).
    assert row.state == "running" and row.seen_at - row.started_at > STALE_S * 1000
    assert row.details["host"] and row.details["queues"] == [celery_queue]
