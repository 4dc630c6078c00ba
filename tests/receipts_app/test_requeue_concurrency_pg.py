"""Two operators requeue the same failed receipt at the same instant: the work is queued once.

Runs on PostgreSQL with real threads and real commits, so ``select_for_update`` and the
conditional UPDATE are exercised as in production.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from receipts_app import enqueue
from receipts_app.audit import Actor
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent
from receipts_app.requeue import Outcome, acknowledge_receipt, requeue_receipt
from tests.factories import make_receipt, make_session

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

OPERATORS = 8


@pytest.fixture
def broker(monkeypatch):
    messages: list[tuple[str, tuple]] = []
    lock = threading.Lock()

    def record(task_name, task_id, args, kwargs):
        with lock:
            messages.append((task_name, tuple(args)))

    monkeypatch.setattr(enqueue, "_send", record)
    return messages


def _race(fn, count: int = OPERATORS) -> list:
    barrier = threading.Barrier(count)

    def run(index: int):
        try:
            barrier.wait()
            return fn(index)
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(run, range(count)))


@pytest.mark.parametrize("with_expectation", [True, False])
def test_concurrent_requeues_of_a_failed_repair_queue_it_once(
    require_postgres, broker, with_expectation
):
    row = make_receipt(scope="repair", status="repair_abandoned", attempt_count=4)
    seen = (
        {"expected_status": row.status, "expected_updated_at": row.updated_at}
        if with_expectation
        else {}
    )

    results = _race(
        lambda i: requeue_receipt(
            receipt_id=row.receipt_id, actor=Actor(f"op{i}", "console"), **seen
        )
    )

    outcomes = sorted(str(r.outcome) for r in results)
    loser = Outcome.STALE if with_expectation else Outcome.IN_FLIGHT
    assert outcomes == sorted(["requeued"] + [str(loser)] * (OPERATORS - 1))
    assert broker == [("repair_receipt", (row.receipt_id,))]
    assert MemoryDurableReceipt.objects.get(pk=row.pk).status == "repair_pending"
    assert (
        ReceiptEvent.objects.filter(receipt_id=row.receipt_id, action="requeue").count()
        == OPERATORS
    )


def test_concurrent_requeues_of_a_failed_checkpoint_queue_one_checkpoint(require_postgres, broker):
    session = make_session(messages=2)
    row = make_receipt(
        session_key=session.session_key,
        session_id=session.session_id,
        scope="checkpoint",
        status="checkpoint_failed",
        coverage_entry_count=2,
    )
    results = _race(
        lambda i: requeue_receipt(
            receipt_id=row.receipt_id,
            actor=Actor(f"op{i}", "api"),
            expected_status="checkpoint_failed",
            expected_updated_at=row.updated_at,
        )
    )
    assert sum(r.outcome is Outcome.REQUEUED for r in results) == 1
    assert [name for name, _ in broker] == ["checkpoint_session"]
    assert MemoryDurableReceipt.objects.get(pk=row.pk).status == "checkpoint_requeued"


def test_requeue_racing_acknowledge_lets_exactly_one_win(require_postgres, broker):
    row = make_receipt(scope="repair", status="repair_failed")
    seen = {"expected_status": row.status, "expected_updated_at": row.updated_at}

    def act(index: int):
        actor = Actor(f"op{index}", "console")
        if index % 2:
            return str(
                acknowledge_receipt(
                    receipt_id=row.receipt_id, actor=actor, reason="done", **seen
                ).outcome
            )
        return str(requeue_receipt(receipt_id=row.receipt_id, actor=actor, **seen).outcome)

    outcomes = _race(act)
    winners = [o for o in outcomes if o in ("requeued", "acknowledged")]
    assert len(winners) == 1
    assert outcomes.count("stale") == OPERATORS - 1
    final = MemoryDurableReceipt.objects.get(pk=row.pk).status
    assert final == ("repair_pending" if winners == ["requeued"] else "acknowledged")
    assert len(broker) == (1 if winners == ["requeued"] else 0)
