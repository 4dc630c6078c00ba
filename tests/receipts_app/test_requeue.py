"""The requeue engine: every outcome, compare-and-set, acknowledge, and the audit trail."""

from __future__ import annotations

import pytest

from opensquilla_site.timeutil import now_ms
from receipts_app.audit import Actor
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent
from receipts_app.requeue import (
    AckOutcome,
    Outcome,
    acknowledge_receipt,
    available_actions,
    classify_requeue,
    complete_checkpoint_requeue,
    requeue_receipt,
)
from sessions_app import services as session_services
from tests.factories import make_receipt, make_session

from .requeue_support import failed_checkpoint, repair_row, sent_fixture  # noqa: F401

pytestmark = pytest.mark.django_db

ALICE = Actor("alice", "console")
HOUR_MS = 3_600_000


def _fresh(row: MemoryDurableReceipt) -> MemoryDurableReceipt:
    return MemoryDurableReceipt.objects.get(pk=row.pk)


def _events(row_or_id) -> list[ReceiptEvent]:
    rid = getattr(row_or_id, "receipt_id", row_or_id)
    return list(ReceiptEvent.objects.filter(receipt_id=rid, action="requeue"))


def _requeue(row, capture, **kwargs):
    with capture(execute=True):
        return requeue_receipt(receipt_id=row.receipt_id, actor=ALICE, **kwargs)


# --- repair rows --------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["repair_failed", "repair_abandoned"])
def test_terminal_repair_goes_back_to_pending_with_a_fresh_budget_and_one_repair_task(
    status, sent, django_capture_on_commit_callbacks
):
    row = repair_row(status, attempt_count=4, next_retry_at_ms=None)
    result = _requeue(row, django_capture_on_commit_callbacks, reason="provider fixed")

    assert result.outcome is Outcome.REQUEUED
    assert result.status == "repair_pending"
    stored = _fresh(row)
    assert stored.status == "repair_pending"
    assert stored.attempt_count == 0
    assert stored.next_retry_at_ms is not None and stored.next_retry_at_ms <= now_ms()
    assert [(name, args) for name, args, _kw, _id in sent] == [
        ("repair_receipt", (row.receipt_id,))
    ]
    assert sent[0][3] == result.task_id
    [event] = _events(row)
    assert (event.actor, event.surface, event.outcome) == ("alice", "console", "requeued")
    assert (event.from_status, event.to_status) == (status, "repair_pending")
    assert event.reason == "provider fixed"
    assert event.details["task_id"] == result.task_id


def test_pending_repair_waiting_on_backoff_is_made_due_now(
    sent, django_capture_on_commit_callbacks
):
    row = repair_row("repair_pending", attempt_count=2, next_retry_at_ms=now_ms() + 6 * HOUR_MS)
    result = _requeue(row, django_capture_on_commit_callbacks)
    assert result.outcome is Outcome.REQUEUED
    stored = _fresh(row)
    assert stored.next_retry_at_ms <= now_ms() and stored.attempt_count == 0
    assert len(sent) == 1


def test_pending_repair_that_is_already_due_is_in_flight_and_untouched(
    sent, django_capture_on_commit_callbacks
):
    row = repair_row("repair_pending", attempt_count=1, next_retry_at_ms=None)
    result = _requeue(row, django_capture_on_commit_callbacks)
    assert result.outcome is Outcome.IN_FLIGHT
    assert _fresh(row).updated_at == row.updated_at
    assert sent == []
    assert _events(row)[0].outcome == "in_flight"


def test_repair_row_of_a_reset_session_can_still_be_requeued(
    sent, django_capture_on_commit_callbacks
):
    # The raw archive outlives a reset; repairing it is exactly what the reset's flush asked for.
    session = make_session(messages=2)
    row = repair_row(session_key=session.session_key, session_id=session.session_id)
    session_services.reset_session(session.session_key)
    assert _requeue(row, django_capture_on_commit_callbacks).outcome is Outcome.REQUEUED


# --- checkpoint rows ----------------------------------------------------------------------


def test_failed_checkpoint_is_requeued_for_the_live_generation(
    sent, django_capture_on_commit_callbacks
):
    session = make_session(messages=2)
    row = failed_checkpoint(session, turn_id="cmp_abc")
    result = _requeue(row, django_capture_on_commit_callbacks, reason="disk replaced")

    assert result.outcome is Outcome.REQUEUED
    assert _fresh(row).status == "checkpoint_requeued"
    [(name, args, kwargs, task_id)] = sent
    assert name == "checkpoint_session" and args == (session.session_key,)
    assert kwargs["requeue_of"] == row.receipt_id and kwargs["turn_id"] == "cmp_abc"
    assert task_id == result.task_id


def test_failed_checkpoint_covered_by_a_later_save_is_superseded_not_replayed(
    sent, django_capture_on_commit_callbacks
):
    session = make_session(messages=3)
    row = failed_checkpoint(session, coverage_entry_count=2)
    saved = make_receipt(
        session_key=session.session_key,
        session_id=session.session_id,
        status="checkpoint_saved",
        coverage_entry_count=3,
        created_at=row.created_at + 1,
    )
    assert classify_requeue(row) == (Outcome.SUPERSEDED, f"superseded by {saved.receipt_id}")

    result = _requeue(row, django_capture_on_commit_callbacks)
    assert result.outcome is Outcome.SUPERSEDED
    assert result.superseded_by == saved.receipt_id
    stored = _fresh(row)
    assert stored.status == "checkpoint_superseded"
    assert stored.resolved_by_receipt_id == saved.receipt_id
    assert sent == []
    assert _events(row)[0].details["superseded_by"] == saved.receipt_id


@pytest.mark.parametrize(
    "saved_fields",
    [
        {"coverage_entry_count": 1},  # covers less than the failed attempt
        {"session_id": "another-generation", "coverage_entry_count": 5},
        {"status": "checkpoint_failed", "coverage_entry_count": 5},
    ],
)
def test_a_save_that_does_not_cover_the_failure_does_not_supersede_it(saved_fields):
    session = make_session(messages=2)
    row = failed_checkpoint(session, coverage_entry_count=2)
    make_receipt(
        **{
            "session_key": session.session_key,
            "session_id": session.session_id,
            "status": "checkpoint_saved",
            "created_at": row.created_at + 1,
            **saved_fields,
        }
    )
    assert classify_requeue(row)[0] is Outcome.REQUEUED


def test_failed_checkpoint_of_a_reset_session_is_fenced_and_unchanged(
    sent, django_capture_on_commit_callbacks
):
    session = make_session(messages=2)
    row = failed_checkpoint(session)
    session_services.reset_session(session.session_key)

    result = _requeue(row, django_capture_on_commit_callbacks)
    assert result.outcome is Outcome.FENCED
    assert "reset" in result.message
    stored = _fresh(row)
    assert (stored.status, stored.updated_at) == ("checkpoint_failed", row.updated_at)
    assert sent == []
    assert _events(row)[0].outcome == "fenced"


def test_failed_checkpoint_whose_session_no_longer_exists_is_fenced(sent):
    row = failed_checkpoint(
        type("Gone", (), {"session_key": "agent:main:webchat:gone", "session_id": "s-gone"})()
    )
    outcome, message = classify_requeue(row)
    assert outcome is Outcome.FENCED and "deleted" in message


def test_requeue_after_session_delete_finds_nothing_and_still_records_the_attempt(
    sent, django_capture_on_commit_callbacks
):
    session = make_session(messages=2)
    row = failed_checkpoint(session)
    session_services.delete_session(session.session_key)

    result = _requeue(row, django_capture_on_commit_callbacks)
    assert result.outcome is Outcome.NOT_FOUND
    assert sent == []
    assert _events(row)[0].outcome == "not_found"


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        ("repair_running", Outcome.IN_FLIGHT),
        ("checkpoint_requeued", Outcome.IN_FLIGHT),
        ("checkpoint_saved", Outcome.NOT_REQUEUEABLE),
        ("flush_appended", Outcome.NOT_REQUEUEABLE),
        ("preimage_saved", Outcome.NOT_REQUEUEABLE),
        ("repair_done", Outcome.NOT_REQUEUEABLE),
        ("checkpoint_recovered", Outcome.NOT_REQUEUEABLE),
        ("acknowledged", Outcome.NOT_REQUEUEABLE),
        ("failed", Outcome.NOT_REQUEUEABLE),
    ],
)
def test_rows_that_must_not_be_replayed_are_left_alone(
    status, outcome, sent, django_capture_on_commit_callbacks
):
    row = make_receipt(status=status)
    result = _requeue(row, django_capture_on_commit_callbacks)
    assert result.outcome is outcome
    assert _fresh(row).status == status
    assert sent == []
    assert _events(row)[0].outcome == str(outcome)


# --- compare-and-set ----------------------------------------------------------------------


def test_requeue_with_a_stale_status_changes_nothing(sent, django_capture_on_commit_callbacks):
    row = repair_row("repair_failed")
    result = _requeue(row, django_capture_on_commit_callbacks, expected_status="repair_abandoned")
    assert result.outcome is Outcome.STALE
    assert "repair_failed" in result.message
    assert _fresh(row).status == "repair_failed"
    assert sent == []


def test_requeue_with_a_stale_updated_at_changes_nothing(sent, django_capture_on_commit_callbacks):
    row = repair_row("repair_failed")
    result = _requeue(
        row,
        django_capture_on_commit_callbacks,
        expected_status="repair_failed",
        expected_updated_at=row.updated_at - 1,
    )
    assert result.outcome is Outcome.STALE
    assert sent == []


def test_second_click_on_the_same_view_is_stale_and_queues_nothing_more(
    sent, django_capture_on_commit_callbacks
):
    row = repair_row("repair_abandoned")
    seen = {"expected_status": row.status, "expected_updated_at": row.updated_at}
    first = _requeue(row, django_capture_on_commit_callbacks, **seen)
    second = _requeue(row, django_capture_on_commit_callbacks, **seen)
    assert (first.outcome, second.outcome) == (Outcome.REQUEUED, Outcome.STALE)
    assert len(sent) == 1
    assert [e.outcome for e in _events(row)] == ["requeued", "stale"]


def test_requeue_of_an_unknown_id_is_not_found():
    result = requeue_receipt(receipt_id="nope", actor=ALICE)
    assert result.outcome is Outcome.NOT_FOUND
    assert result.to_dict()["outcome"] == "not_found"
    assert _events("nope")[0].actor == "alice"


def test_plan_id_and_surface_are_on_the_event():
    row = repair_row("repair_failed")
    requeue_receipt(receipt_id=row.receipt_id, actor=Actor("bob", "cli"), plan_id="plan-1")
    [event] = _events(row)
    assert (event.actor, event.surface, event.plan_id) == ("bob", "cli", "plan-1")


# --- completing a requeued checkpoint -----------------------------------------------------


def _requeued_checkpoint(_sent, capture):
    session = make_session(messages=2)
    row = failed_checkpoint(session)
    _requeue(row, capture)
    return session, _fresh(row)


def test_completion_with_a_saved_checkpoint_recovers_the_row(
    sent, django_capture_on_commit_callbacks
):
    session, row = _requeued_checkpoint(sent, django_capture_on_commit_callbacks)
    saved = make_receipt(
        session_key=session.session_key, session_id=session.session_id, coverage_entry_count=2
    )
    complete_checkpoint_requeue(requeued_receipt_id=row.receipt_id, saved=saved, error=None)

    stored = _fresh(row)
    assert stored.status == "checkpoint_recovered"
    assert stored.resolved_by_receipt_id == saved.receipt_id
    event = ReceiptEvent.objects.get(receipt_id=row.receipt_id, action="requeue_complete")
    assert (event.surface, event.to_status, event.outcome) == (
        "worker",
        "checkpoint_recovered",
        "recovered",
    )

    # A redelivered task completing again changes nothing and adds nothing.
    complete_checkpoint_requeue(requeued_receipt_id=row.receipt_id, saved=saved, error=None)
    assert (
        ReceiptEvent.objects.filter(receipt_id=row.receipt_id, action="requeue_complete").count()
        == 1
    )


def test_completion_with_an_error_puts_the_row_back_to_failed_with_the_new_reason(
    sent, django_capture_on_commit_callbacks
):
    _session, row = _requeued_checkpoint(sent, django_capture_on_commit_callbacks)
    complete_checkpoint_requeue(
        requeued_receipt_id=row.receipt_id, saved=None, error=OSError("read-only file system")
    )
    stored = _fresh(row)
    assert (stored.status, stored.reason) == ("checkpoint_failed", "read-only file system")
    assert classify_requeue(stored)[0] is Outcome.REQUEUED


def test_completion_with_a_save_of_another_generation_is_a_failure(
    sent, django_capture_on_commit_callbacks
):
    session, row = _requeued_checkpoint(sent, django_capture_on_commit_callbacks)
    other = make_receipt(session_key=session.session_key, session_id="next-generation")
    complete_checkpoint_requeue(requeued_receipt_id=row.receipt_id, saved=other, error=None)
    stored = _fresh(row)
    assert stored.status == "checkpoint_failed"
    assert "generation changed" in stored.reason


# --- acknowledge --------------------------------------------------------------------------


@pytest.mark.parametrize("reason", ["", "   "])
def test_acknowledge_without_a_written_reason_is_refused(reason):
    row = repair_row("repair_abandoned")
    with pytest.raises(ValueError, match="acknowledge needs a written reason"):
        acknowledge_receipt(receipt_id=row.receipt_id, actor=ALICE, reason=reason)
    assert _fresh(row).status == "repair_abandoned"
    assert not ReceiptEvent.objects.filter(receipt_id=row.receipt_id, action="acknowledge").exists()


@pytest.mark.parametrize(
    "status",
    ["checkpoint_failed", "repair_failed", "repair_abandoned", "receipt_orphaned", "hash_mismatch"],
)
def test_acknowledge_accepts_a_terminal_failure_and_keeps_the_row(status):
    row = make_receipt(status=status)
    result = acknowledge_receipt(
        receipt_id=row.receipt_id,
        actor=Actor("carol", "admin"),
        reason="known outage, data re-imported",
    )
    assert result.outcome is AckOutcome.ACKNOWLEDGED
    assert (result.status, result.from_status) == ("acknowledged", status)
    stored = _fresh(row)
    assert stored.status == "acknowledged"
    event = ReceiptEvent.objects.get(receipt_id=row.receipt_id, action="acknowledge")
    assert (event.actor, event.surface, event.from_status, event.to_status) == (
        "carol",
        "admin",
        status,
        "acknowledged",
    )
    assert event.reason == "known outage, data re-imported"
    assert classify_requeue(stored)[0] is Outcome.NOT_REQUEUEABLE


@pytest.mark.parametrize("status", ["repair_pending", "checkpoint_saved", "checkpoint_requeued"])
def test_acknowledge_refuses_rows_that_are_not_terminal_failures(status):
    row = make_receipt(status=status)
    result = acknowledge_receipt(receipt_id=row.receipt_id, actor=ALICE, reason="why not")
    assert result.outcome is AckOutcome.NOT_ACKNOWLEDGEABLE
    assert _fresh(row).status == status


def test_acknowledge_is_compare_and_set_too():
    row = repair_row("repair_failed")
    stale = acknowledge_receipt(
        receipt_id=row.receipt_id,
        actor=ALICE,
        reason="ok",
        expected_status="repair_failed",
        expected_updated_at=row.updated_at + 5,
    )
    assert stale.outcome is AckOutcome.STALE
    assert _fresh(row).status == "repair_failed"
    missing = acknowledge_receipt(receipt_id="nope", actor=ALICE, reason="ok")
    assert missing.outcome is AckOutcome.NOT_FOUND


# --- actions offered to the console -------------------------------------------------------


def test_available_actions_follow_the_rules():
    session = make_session(messages=2)
    failed = failed_checkpoint(session)
    assert available_actions(failed) == {"requeue": (True, ""), "acknowledge": (True, "")}

    saved = make_receipt(status="checkpoint_saved")
    actions = available_actions(saved)
    assert actions["requeue"][0] is False and "success" in actions["requeue"][1]
    assert actions["acknowledge"] == (
        False,
        "checkpoint_saved is not a failure; there is nothing to accept",
    )
    done = make_receipt(status="acknowledged")
    assert available_actions(done)["acknowledge"] == (False, "already acknowledged")

    running = make_receipt(status="repair_running")
    assert available_actions(running)["requeue"] == (
        False,
        "in flight: a repair worker is running it",
    )
