"""A real Celery worker reports itself alive and records its task runs (operations_app)."""

from __future__ import annotations

import pytest

from operations_app.models import Heartbeat, TaskStat
from receipts_app import tasks
from tests.worker.conftest import service_marks, wait_for

pytestmark = [*service_marks(), pytest.mark.django_db(transaction=True)]


def test_worker_heartbeat_and_task_statistics_reach_the_database(start_worker, celery_queue):
    worker = start_worker()
    beat = wait_for(
        lambda: Heartbeat.objects.filter(kind="worker", name__startswith=celery_queue).first(),
        what="the worker's start to be recorded",
    )
    assert beat.state == "running"
    tasks.repair_tick.delay()
    stat = wait_for(
        lambda: TaskStat.objects.filter(task="receipts_app.tasks.repair_tick", runs__gte=1).first(),
        what="the repair tick's run to be recorded",
    )
    assert stat.failures == 0 and stat.duration_sum_ms > 0
    worker.stop()
    wait_for(
        lambda: Heartbeat.objects.filter(pk=beat.pk, state="stopped").exists(),
        what="the worker's shutdown to be recorded",
    )
