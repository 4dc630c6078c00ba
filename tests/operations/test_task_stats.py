"""Task statistics: a worker process's runs reach ``/metrics`` as one write per second, exact."""

from __future__ import annotations

import pytest

from operations_app import celery_signals
from operations_app.models import TaskStat

pytestmark = pytest.mark.django_db


def test_runs_held_by_a_worker_process_are_written_whole_on_flush():
    buffer = celery_signals._TaskStatBuffer()
    buffer.FLUSH_SECONDS = 3600  # only the explicit flush (a process ending) writes here
    for duration_ms, failed in ((2.0, False), (3.0, True), (5.0, False)):
        buffer.note("receipts_app.tasks.repair_receipt", duration_ms=duration_ms, failed=failed)
    buffer.note("receipts_app.tasks.repair_tick", duration_ms=7.0, failed=False)
    assert not TaskStat.objects.exists()  # held, not yet written: no commit per task

    buffer.flush()

    repair = TaskStat.objects.get(task="receipts_app.tasks.repair_receipt")
    assert (repair.runs, repair.failures, repair.duration_sum_ms) == (3, 1, 10.0)
    assert repair.last_failure_at is not None
    tick = TaskStat.objects.get(task="receipts_app.tasks.repair_tick")
    assert (tick.runs, tick.failures, tick.last_failure_at) == (1, 0, None)

    buffer.note("receipts_app.tasks.repair_tick", duration_ms=1.0, failed=False)
    buffer.flush()
    assert TaskStat.objects.get(task="receipts_app.tasks.repair_tick").runs == 2
    buffer.flush()  # nothing held: nothing written twice
    assert TaskStat.objects.get(task="receipts_app.tasks.repair_tick").runs == 2
