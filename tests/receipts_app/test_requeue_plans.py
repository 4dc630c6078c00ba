"""Requeue plans: frozen filter, dry run, batched idempotent execution with progress."""

from __future__ import annotations

import pytest

from opensquilla_site.exceptions import ValidationFailed
from opensquilla_site.timeutil import now_ms
from receipts_app.audit import Actor
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent, RequeuePlan
from receipts_app.requeue import (
    create_requeue_plan,
    plans,
    run_requeue_plan,
    start_requeue_plan,
)
from sessions_app import services as session_services
from tests.factories import make_receipt, make_session

from .requeue_support import failed_checkpoint, repair_row, sent_fixture  # noqa: F401

pytestmark = pytest.mark.django_db

DAVE = Actor("dave", "cli")
FAILURES = [
    "checkpoint_failed",
    "repair_failed",
    "repair_abandoned",
    "repair_running",
    "checkpoint_saved",
]


def _mixed_ledger() -> dict[str, list[MemoryDurableReceipt]]:
    """Rows for every outcome a plan can meet, each session distinct so outcomes are stable."""
    live = [failed_checkpoint(make_session(messages=2)) for _ in range(2)]
    reset_session = make_session(messages=2)
    fenced = failed_checkpoint(reset_session)
    session_services.reset_session(reset_session.session_key)
    covered_session = make_session(messages=3)
    superseded = failed_checkpoint(covered_session, coverage_entry_count=2)
    covering = make_receipt(
        session_key=covered_session.session_key,
        session_id=covered_session.session_id,
        coverage_entry_count=3,
        created_at=superseded.created_at + 1,
    )
    repairs = [repair_row("repair_failed") for _ in range(3)] + [repair_row("repair_abandoned")]
    running = [make_receipt(scope="repair", status="repair_running")]
    done = [make_receipt(scope="checkpoint", status="checkpoint_saved")]
    return {
        "requeued": live + repairs,
        "fenced": [fenced],
        "superseded": [superseded],
        "in_flight": running,
        "not_requeueable": done + [covering],
    }


def test_dry_run_counts_and_samples_each_outcome_without_touching_a_row():
    rows = _mixed_ledger()
    before = dict(MemoryDurableReceipt.objects.values_list("receipt_id", "status"))

    plan = create_requeue_plan(
        filters={"status": FAILURES},
        receipt_ids=None,
        actor=DAVE,
        reason="outage over",
        sample_size=2,
    )

    assert plan.state == "previewed"
    assert plan.dry_run_counts == {outcome: len(group) for outcome, group in rows.items()}
    assert plan.total == sum(len(group) for group in rows.values())
    assert len(plan.dry_run_samples["requeued"]) == 2
    [fenced_sample] = plan.dry_run_samples["fenced"]
    assert fenced_sample["receipt_id"] == rows["fenced"][0].receipt_id
    assert "reset" in fenced_sample["message"]
    assert set(fenced_sample) == {"receipt_id", "session_key", "status", "reason", "message"}
    assert dict(MemoryDurableReceipt.objects.values_list("receipt_id", "status")) == before
    assert (plan.created_by, plan.surface, plan.reason) == ("dave", "cli", "outage over")


def test_execution_results_match_the_dry_run_and_are_audited_under_the_plan(
    sent, django_capture_on_commit_callbacks
):
    _mixed_ledger()
    plan = create_requeue_plan(filters={"status": FAILURES}, receipt_ids=None, actor=DAVE)

    with django_capture_on_commit_callbacks(execute=True):
        queued = start_requeue_plan(plan_id=plan.plan_id, actor=DAVE)
    assert queued.state == "queued"
    assert [(name, args) for name, args, _kw, _id in sent] == [
        ("run_requeue_plan", (plan.plan_id,))
    ]

    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        done = run_requeue_plan(plan.plan_id, batch_size=3)

    assert done.state == "done"
    assert done.processed == plan.total
    assert done.result_counts == plan.dry_run_counts
    assert done.started_at is not None and done.finished_at is not None
    # One task per requeued row: checkpoints for the live failures, repairs for the rest.
    assert sorted(name for name, *_ in sent) == ["checkpoint_session"] * 2 + ["repair_receipt"] * 4
    events = ReceiptEvent.objects.filter(plan_id=plan.plan_id, action="requeue")
    assert events.count() == plan.total
    assert set(events.values_list("actor", "surface")) == {("dave", "cli")}


def test_executing_twice_queues_once_and_running_twice_changes_nothing(
    sent, django_capture_on_commit_callbacks
):
    _mixed_ledger()
    plan = create_requeue_plan(filters={"status": FAILURES}, receipt_ids=None, actor=DAVE)
    with django_capture_on_commit_callbacks(execute=True):
        start_requeue_plan(plan_id=plan.plan_id, actor=DAVE)
        again = start_requeue_plan(plan_id=plan.plan_id, actor=Actor("erin", "api"))
    assert again.state == "queued"
    assert [name for name, *_ in sent] == ["run_requeue_plan"]

    first = run_requeue_plan(plan.plan_id)
    events_after_first = ReceiptEvent.objects.count()
    second = run_requeue_plan(plan.plan_id)
    assert (second.state, second.processed, second.result_counts) == (
        "done",
        first.processed,
        first.result_counts,
    )
    assert ReceiptEvent.objects.count() == events_after_first
    with django_capture_on_commit_callbacks(execute=True):
        start_requeue_plan(plan_id=plan.plan_id, actor=DAVE)
    assert RequeuePlan.objects.get(pk=plan.plan_id).state == "done"


def test_a_run_cut_short_resumes_from_its_cursor(sent):
    for _ in range(5):
        repair_row("repair_failed")
    plan = create_requeue_plan(filters={"status": "repair_failed"}, receipt_ids=None, actor=DAVE)
    start_requeue_plan(plan_id=plan.plan_id, actor=DAVE)

    partial = run_requeue_plan(plan.plan_id, batch_size=2, time_budget_s=0)
    assert (partial.state, partial.processed) == ("running", 2)
    assert partial.cursor_id is not None

    finished = run_requeue_plan(plan.plan_id, batch_size=2)
    assert (finished.state, finished.processed) == ("done", 5)
    assert finished.result_counts == {"requeued": 5}
    # Every row was requeued exactly once across the two runs.
    assert ReceiptEvent.objects.filter(plan_id=plan.plan_id).count() == 5


def test_a_failing_batch_marks_the_plan_failed_and_a_new_execution_resumes(monkeypatch, sent):
    rows = [repair_row("repair_failed") for _ in range(4)]
    plan = create_requeue_plan(filters={"status": "repair_failed"}, receipt_ids=None, actor=DAVE)
    start_requeue_plan(plan_id=plan.plan_id, actor=DAVE)
    real = plans.requeue_batch

    def flaky(targets, **kwargs):
        if rows[2].receipt_id in {receipt_id for _pk, receipt_id in targets}:
            raise RuntimeError("database went away")
        return real(targets, **kwargs)

    monkeypatch.setattr(plans, "requeue_batch", flaky)
    failed = run_requeue_plan(plan.plan_id, batch_size=2)
    assert failed.state == "failed"
    assert "database went away" in failed.error
    assert failed.processed == 2  # the failing batch rolled back as a whole

    monkeypatch.setattr(plans, "requeue_batch", real)
    assert start_requeue_plan(plan_id=plan.plan_id, actor=DAVE).state == "queued"
    done = run_requeue_plan(plan.plan_id, batch_size=2)
    assert (done.state, done.processed, done.result_counts) == ("done", 4, {"requeued": 4})
    assert set(MemoryDurableReceipt.objects.values_list("status", flat=True)) == {"repair_pending"}


def test_plan_on_explicit_receipt_ids_touches_only_those(sent):
    picked = [repair_row("repair_failed") for _ in range(2)]
    other = repair_row("repair_failed")
    plan = create_requeue_plan(
        filters={}, receipt_ids=[r.receipt_id for r in picked], actor=DAVE, reason="these two"
    )
    assert plan.total == 2
    start_requeue_plan(plan_id=plan.plan_id, actor=DAVE)
    run_requeue_plan(plan.plan_id)
    assert MemoryDurableReceipt.objects.get(pk=other.pk).status == "repair_failed"
    assert {MemoryDurableReceipt.objects.get(pk=r.pk).status for r in picked} == {"repair_pending"}


def test_plan_filters_use_the_shared_receipt_filter():
    make_receipt(
        session_key="agent:ops:cron:nightly",
        scope="repair",
        status="repair_failed",
        reason="OSError: disk",
    )
    make_receipt(
        session_key="agent:main:webchat:x",
        scope="repair",
        status="repair_failed",
        reason="OSError: disk",
    )
    make_receipt(
        session_key="agent:ops:cron:other", scope="repair", status="repair_failed", reason="timeout"
    )
    plan = create_requeue_plan(
        filters={"agent": "ops", "reason": "oserror", "scope": "repair"},
        receipt_ids=None,
        actor=DAVE,
    )
    assert plan.total == 1
    assert plan.filters["reason"] == "oserror"
    prefix = create_requeue_plan(
        filters={"session_key_prefix": "agent:ops:"}, receipt_ids=None, actor=DAVE
    )
    assert prefix.total == 2


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ({}, "needs a filter or receipt ids"),
        ({"colour": "red"}, "unknown filter keys: colour"),
        ({"attempts_min": "many"}, "attempts_min must be a whole number"),
    ],
)
def test_bad_plan_input_is_rejected_before_anything_is_stored(filters, message):
    with pytest.raises(ValidationFailed, match=message):
        create_requeue_plan(filters=filters, receipt_ids=None, actor=DAVE)
    assert not RequeuePlan.objects.exists()


def test_unknown_plan_ids_raise_key_error():
    with pytest.raises(KeyError):
        start_requeue_plan(plan_id="missing", actor=DAVE)
    with pytest.raises(KeyError):
        run_requeue_plan("missing")


def test_a_previewed_plan_is_not_run_without_being_executed(sent):
    repair_row("repair_failed")
    plan = create_requeue_plan(filters={"status": "repair_failed"}, receipt_ids=None, actor=DAVE)
    result = run_requeue_plan(plan.plan_id)
    assert (result.state, result.processed) == ("previewed", 0)
    assert MemoryDurableReceipt.objects.get().status == "repair_failed"
    assert now_ms() >= plan.created_at
