"""Plan execution requeues a batch as a set: same outcomes, rows, events and tasks as one by one."""

from __future__ import annotations

import pytest
from django.db import transaction

from receipts_app.audit import Actor
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent
from receipts_app.requeue import Outcome, requeue_receipt
from receipts_app.requeue.batch import requeue_batch
from sessions_app import services as session_services
from tests.factories import make_receipt, make_session

from .requeue_support import failed_checkpoint, repair_row, sent_fixture  # noqa: F401

pytestmark = pytest.mark.django_db

OPS = Actor("ops", "cli")


def _ledger() -> list[MemoryDurableReceipt]:
    """One row per rule branch, in insertion order."""
    live = failed_checkpoint(make_session(messages=2), turn_id="cmp_1")
    reset = make_session(messages=2)
    fenced = failed_checkpoint(reset)
    session_services.reset_session(reset.session_key)
    covered = make_session(messages=3)
    superseded = failed_checkpoint(covered, coverage_entry_count=2)
    make_receipt(
        session_key=covered.session_key,
        session_id=covered.session_id,
        coverage_entry_count=3,
        created_at=superseded.created_at + 1,
    )
    waiting = repair_row("repair_pending", next_retry_at_ms=10**15)
    return [
        live,
        fenced,
        superseded,
        repair_row("repair_failed"),
        repair_row("repair_abandoned"),
        waiting,
        make_receipt(scope="repair", status="repair_running"),
        make_receipt(scope="checkpoint", status="checkpoint_saved"),
    ]


def _state() -> dict[str, tuple]:
    return {
        r.receipt_id: (r.status, r.attempt_count, r.resolved_by_receipt_id)
        for r in MemoryDurableReceipt.objects.all()
    }


def _events() -> list[tuple]:
    return [
        (e.receipt_id, e.from_status, e.to_status, e.outcome, e.reason, e.plan_id, e.actor)
        for e in ReceiptEvent.objects.filter(action="requeue").order_by("id")
    ]


def test_a_batch_does_exactly_what_requeueing_each_row_does(
    sent, django_capture_on_commit_callbacks
):
    rows = _ledger()
    targets = [(r.pk, r.receipt_id) for r in rows]

    # First one by one, in a transaction that is rolled back, to learn what it would do.
    with pytest.raises(RuntimeError), django_capture_on_commit_callbacks(execute=False):
        with transaction.atomic():
            singles = [
                requeue_receipt(receipt_id=rid, actor=OPS, reason="why", plan_id="p1")
                for _pk, rid in targets
            ]
            expected_state, expected_events = _state(), _events()
            raise RuntimeError("roll back")
    assert sent == []

    with django_capture_on_commit_callbacks(execute=True):
        with transaction.atomic():
            batch = requeue_batch(targets, actor=OPS, reason="why", plan_id="p1")

    strip = [(r.receipt_id, r.outcome, r.message, r.status, r.superseded_by) for r in batch]
    assert strip == [
        (r.receipt_id, r.outcome, r.message, r.status, r.superseded_by) for r in singles
    ]
    assert [r.outcome for r in batch] == [
        Outcome.REQUEUED,
        Outcome.FENCED,
        Outcome.SUPERSEDED,
        Outcome.REQUEUED,
        Outcome.REQUEUED,
        Outcome.REQUEUED,
        Outcome.IN_FLIGHT,
        Outcome.NOT_REQUEUEABLE,
    ]
    assert _state() == expected_state
    assert _events() == expected_events
    # One follow-up per requeued row, in the batch's order, with the ids the results report.
    assert [(name, args) for name, args, _kw, _id in sent] == [
        ("checkpoint_session", (rows[0].session_key,)),
        ("repair_receipt", (rows[3].receipt_id,)),
        ("repair_receipt", (rows[4].receipt_id,)),
        ("repair_receipt", (rows[5].receipt_id,)),
    ]
    assert sent[0][2]["requeue_of"] == rows[0].receipt_id and sent[0][2]["turn_id"] == "cmp_1"
    assert [task_id for *_rest, task_id in sent] == [r.task_id for r in batch if r.task_id]
    details = ReceiptEvent.objects.get(receipt_id=rows[3].receipt_id).details
    assert details["task_id"] == batch[3].task_id


def test_a_receipt_gone_before_the_batch_is_reported_not_found(sent):
    kept, gone = repair_row("repair_failed"), repair_row("repair_failed")
    targets = [(kept.pk, kept.receipt_id), (gone.pk, gone.receipt_id)]
    MemoryDurableReceipt.objects.filter(pk=gone.pk).delete()

    results = requeue_batch(targets, actor=OPS)

    assert [r.outcome for r in results] == [Outcome.REQUEUED, Outcome.NOT_FOUND]
    event = ReceiptEvent.objects.get(receipt_id=gone.receipt_id)
    assert (event.outcome, event.from_status, event.to_status) == ("not_found", None, None)
