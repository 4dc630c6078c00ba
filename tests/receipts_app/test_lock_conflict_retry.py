"""A transaction PostgreSQL aborted on a lock conflict is run again; a plan never fails on one.

The conflict is simulated (an ``OperationalError`` caused by a driver error with SQLSTATE 40P01)
so these run on every database; ``test_plans_beside_bulk_pg.py`` provokes real ones.
"""

from __future__ import annotations

import pytest
from django.db import OperationalError

from receipts_app import ledger
from receipts_app.audit import Actor
from receipts_app.ledger import retry
from receipts_app.models import MemoryDurableReceipt
from receipts_app.requeue import create_requeue_plan, plans, run_requeue_plan, start_requeue_plan

from .requeue_support import repair_row, sent_fixture  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

DAVE = Actor("dave", "cli")


class _Deadlock(Exception):
    sqlstate = "40P01"


def _conflict() -> OperationalError:
    error = OperationalError("deadlock detected")
    error.__cause__ = _Deadlock()
    return error


@pytest.fixture(autouse=True)
def no_pause(monkeypatch):
    monkeypatch.setattr(retry.time, "sleep", lambda seconds: None)


def _flaky(real, conflicts: int):
    calls = {"n": 0}

    def run(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] <= conflicts:
            raise _conflict()
        return real(*args, **kwargs)

    return run, calls


def test_a_bulk_write_is_retried_past_more_than_one_conflict(monkeypatch):
    from receipts_app.ledger import fastsql

    flaky, calls = _flaky(fastsql.bulk_upsert, conflicts=3)
    monkeypatch.setattr(fastsql, "bulk_upsert", flaky)
    row = MemoryDurableReceipt(
        session_key="agent:main:x",
        session_id="s",
        scope="checkpoint",
        idempotency_key="retry:1",
        status="checkpoint_saved",
    )
    [stored] = ledger.bulk_upsert_memory_durable_receipts([row])
    assert calls["n"] == 4 and MemoryDurableReceipt.objects.get(pk=stored.pk)


def test_a_conflict_that_never_clears_is_raised_after_the_last_attempt(monkeypatch):
    flaky, calls = _flaky(lambda: None, conflicts=100)
    with pytest.raises(OperationalError):
        retry.atomic_retrying(flaky, attempts=3)
    assert calls["n"] == 3


def test_another_database_error_is_not_retried():
    calls = {"n": 0}

    def broken():
        calls["n"] += 1
        raise OperationalError("disk I/O error")

    with pytest.raises(OperationalError):
        retry.atomic_retrying(broken)
    assert calls["n"] == 1


def test_a_plan_batch_is_retried_after_a_deadlock_and_the_plan_finishes(monkeypatch, sent):
    rows = [repair_row("repair_failed") for _ in range(4)]
    plan = create_requeue_plan(filters={"status": "repair_failed"}, receipt_ids=None, actor=DAVE)
    start_requeue_plan(plan_id=plan.plan_id, actor=DAVE)
    flaky, _calls = _flaky(plans.requeue_batch, conflicts=2)
    monkeypatch.setattr(plans, "requeue_batch", flaky)
    done = run_requeue_plan(plan.plan_id, batch_size=2, time_budget_s=60)
    assert (done.state, done.processed, done.error) == ("done", len(rows), "")
    assert done.result_counts == {"requeued": 4}


def test_a_plan_still_conflicting_after_every_retry_is_left_running_not_failed(monkeypatch, sent):
    repair_row("repair_failed")
    plan = create_requeue_plan(filters={"status": "repair_failed"}, receipt_ids=None, actor=DAVE)
    start_requeue_plan(plan_id=plan.plan_id, actor=DAVE)
    flaky, _calls = _flaky(plans.requeue_batch, conflicts=retry.ATTEMPTS)
    monkeypatch.setattr(plans, "requeue_batch", flaky)
    later = run_requeue_plan(plan.plan_id, batch_size=2, time_budget_s=60)
    # The task re-enqueues a running plan: the next slice does the batch.
    assert (later.state, later.processed, later.error) == ("running", 0, "")
    finished = run_requeue_plan(plan.plan_id, batch_size=2, time_budget_s=60)
    assert (finished.state, finished.processed) == ("done", 1)
