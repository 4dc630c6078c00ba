"""Celery tasks run eagerly: triggers, the checkpoint requeue round trip, the tick's sweep.

Real-worker tests (a separate process, a real broker) live elsewhere; these pin what each
task does with its ids and that it is safe to run twice.
"""

from __future__ import annotations

import pytest

from opensquilla_site.celery import app as celery_app
from opensquilla_site.timeutil import now_ms
from receipts_app import checkpoint, enqueue, ledger, repair, task_limits, tasks
from receipts_app.audit import Actor
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent, RequeuePlan
from receipts_app.requeue import create_requeue_plan, requeue_receipt, start_requeue_plan
from receipts_app.services import queue_checkpoint, queue_flush
from sessions_app import services as session_services
from tests.factories import make_session

from .requeue_support import repair_row

pytestmark = pytest.mark.django_db

ALICE = Actor("alice", "console")
ELEVEN_MINUTES_MS = 11 * 60 * 1000


@pytest.fixture(autouse=True)
def eager(settings, monkeypatch):
    settings.CELERY_TASK_ALWAYS_EAGER = True
    # The Celery app copied its configuration already; flip the live values too.
    monkeypatch.setitem(celery_app.conf, "task_always_eager", True)
    monkeypatch.setitem(celery_app.conf, "task_eager_propagates", True)


@pytest.fixture
def no_workspace(settings):
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = None


def _fresh(row: MemoryDurableReceipt) -> MemoryDurableReceipt:
    return MemoryDurableReceipt.objects.get(pk=row.pk)


def _real_failed_checkpoint(session) -> MemoryDurableReceipt:
    """A checkpoint_failed row written by the checkpoint service itself (no workspace)."""
    with pytest.raises(RuntimeError, match="not configured"):
        checkpoint.record_memory_checkpoint(session.session_key)
    return MemoryDurableReceipt.objects.get(
        session_key=session.session_key, status="checkpoint_failed"
    )


# --- triggers -----------------------------------------------------------------------------


def test_checkpoint_now_queues_a_task_that_saves_a_checkpoint(
    workspace, django_capture_on_commit_callbacks
):
    session = make_session(messages=3)
    with django_capture_on_commit_callbacks(execute=True):
        task_id = queue_checkpoint(session_key=session.session_key, actor=ALICE)

    saved = MemoryDurableReceipt.objects.get(session_key=session.session_key)
    assert (saved.status, saved.coverage_entry_count) == ("checkpoint_saved", 3)
    assert (workspace / saved.source_path).is_file()
    event = ReceiptEvent.objects.get(action="checkpoint_now")
    assert (event.actor, event.surface, event.session_key) == (
        "alice",
        "console",
        session.session_key,
    )
    assert event.details["task_id"] == task_id


def test_checkpoint_now_rejects_unknown_sessions_and_empty_transcripts():
    with pytest.raises(KeyError, match="Session not found"):
        queue_checkpoint(session_key="agent:main:webchat:nobody", actor=ALICE)
    empty = make_session()
    with pytest.raises(ValueError, match="cannot be empty"):
        queue_checkpoint(session_key=empty.session_key, actor=ALICE)
    with pytest.raises(ValueError, match="cannot be empty"):
        queue_flush(session_key=empty.session_key, actor=ALICE)
    assert not ReceiptEvent.objects.exists()


def test_checkpoint_task_failure_is_a_receipt_and_a_result_not_a_crash(no_workspace):
    session = make_session(messages=2)
    result = tasks.checkpoint_session.delay(session.session_key).get()
    failed = MemoryDurableReceipt.objects.get(session_key=session.session_key)
    assert failed.status == "checkpoint_failed"
    assert result["status"] == "checkpoint_failed"
    assert result["receipt_id"] == failed.receipt_id
    assert "not configured" in result["error"]


def test_flush_now_runs_the_flush_and_records_who_asked(
    tmp_path, settings, django_capture_on_commit_callbacks
):
    settings.OPENSQUILLA_MEMORY_WORKSPACE = str(tmp_path / "mem-{agent}")
    settings.OPENSQUILLA_FLUSH_PROVIDER = "none"
    session = make_session(messages=2)
    with django_capture_on_commit_callbacks(execute=True):
        queue_flush(session_key=session.session_key, actor=Actor("bob", "api"))

    statuses = set(
        MemoryDurableReceipt.objects.filter(session_key=session.session_key).values_list(
            "status", flat=True
        )
    )
    assert "repair_pending" in statuses  # no provider: archive-only, queued for repair
    event = ReceiptEvent.objects.get(action="flush_now")
    assert (event.actor, event.surface) == ("bob", "api")


def test_flush_task_for_a_vanished_session_reports_instead_of_retrying():
    result = tasks.flush_session.delay("agent:main:webchat:gone").get()
    assert result["status"] == "skipped" and "Session not found" in result["error"]


# --- the checkpoint requeue round trip ----------------------------------------------------


def test_requeued_checkpoint_failure_ends_recovered_and_linked(
    settings, workspace, django_capture_on_commit_callbacks
):
    session = make_session(messages=2)
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = None
    failed = _real_failed_checkpoint(session)
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(workspace)

    with django_capture_on_commit_callbacks(execute=True):
        result = requeue_receipt(receipt_id=failed.receipt_id, actor=ALICE, reason="disk fixed")

    assert result.outcome == "requeued"
    stored = _fresh(failed)
    assert stored.status == "checkpoint_recovered"
    saved = MemoryDurableReceipt.objects.get(receipt_id=stored.resolved_by_receipt_id)
    assert (saved.status, saved.session_id, saved.coverage_entry_count) == (
        "checkpoint_saved",
        session.session_id,
        2,
    )
    timeline = list(
        ReceiptEvent.objects.filter(receipt_id=failed.receipt_id).values_list(
            "action", "actor", "surface", "to_status"
        )
    )
    assert timeline == [
        ("requeue", "alice", "console", "checkpoint_requeued"),
        ("requeue_complete", "worker", "worker", "checkpoint_recovered"),
    ]

    # A second delivery of the same task is a no-op.
    again = tasks.checkpoint_session.delay(session.session_key, requeue_of=failed.receipt_id).get()
    assert again["skipped"] is True and again["receipt_id"] == saved.receipt_id
    assert MemoryDurableReceipt.objects.filter(status="checkpoint_saved").count() == 1


def test_requeued_checkpoint_that_fails_again_goes_back_to_failed_without_a_duplicate(
    no_workspace, django_capture_on_commit_callbacks
):
    session = make_session(messages=2)
    failed = _real_failed_checkpoint(session)
    with django_capture_on_commit_callbacks(execute=True):
        requeue_receipt(receipt_id=failed.receipt_id, actor=ALICE)

    stored = _fresh(failed)
    assert stored.status == "checkpoint_failed"
    assert "not configured" in stored.reason
    assert MemoryDurableReceipt.objects.filter(status="checkpoint_failed").count() == 1
    outcomes = ReceiptEvent.objects.filter(
        receipt_id=failed.receipt_id, action="requeue_complete"
    ).values_list("outcome", flat=True)
    assert list(outcomes) == ["failed"]


def test_session_reset_before_the_task_runs_fences_the_requeued_checkpoint(
    settings, workspace, django_capture_on_commit_callbacks
):
    session = make_session(messages=2)
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = None
    failed = _real_failed_checkpoint(session)
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(workspace)

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        requeue_receipt(receipt_id=failed.receipt_id, actor=ALICE)
    session_services.reset_session(session.session_key)
    session_services.append_message(session.session_key, role="user", content="new generation")
    for callback in callbacks:
        callback()

    stored = _fresh(failed)
    assert stored.status == "checkpoint_failed"
    assert "generation changed" in stored.reason
    assert not MemoryDurableReceipt.objects.filter(status="checkpoint_saved").exists()


# --- repair and requeue tasks -------------------------------------------------------------


def test_requeued_repair_runs_the_repair_for_that_row(
    monkeypatch, django_capture_on_commit_callbacks
):
    repaired: list[str] = []
    monkeypatch.setattr(repair, "repair_one", lambda rid: repaired.append(rid) or {"status": "ok"})
    row = repair_row("repair_abandoned")
    with django_capture_on_commit_callbacks(execute=True):
        requeue_receipt(receipt_id=row.receipt_id, actor=ALICE)
    assert repaired == [row.receipt_id]


def test_run_requeue_plan_task_runs_the_plan_in_slices(
    monkeypatch, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(repair, "repair_one", lambda rid: {"status": "ok"})
    monkeypatch.setattr(tasks, "PLAN_SLICE_SECONDS", 0)
    for _ in range(3):
        repair_row("repair_failed")
    plan = create_requeue_plan(filters={"status": "repair_failed"}, receipt_ids=None, actor=ALICE)
    with django_capture_on_commit_callbacks(execute=True):
        start_requeue_plan(plan_id=plan.plan_id, actor=ALICE)
    stored = RequeuePlan.objects.get(pk=plan.plan_id)
    assert (stored.state, stored.processed, stored.result_counts) == ("done", 3, {"requeued": 3})


def test_repair_tick_runs_the_worker_and_resends_lost_work(
    monkeypatch, workspace, django_capture_on_commit_callbacks
):
    monkeypatch.setattr(repair, "repair_one", lambda rid: {"status": "ok"})
    session = make_session(messages=2)
    # Due for the repair worker, but its archive is gone: the tick tries it and backs off.
    due = repair_row("repair_pending", attempt_count=1, target_path="memory/.raw_fallbacks/gone.md")
    # A checkpoint requeue whose message never reached the broker.
    lost = ledger.upsert_memory_durable_receipt(
        MemoryDurableReceipt(
            session_key=session.session_key,
            session_id=session.session_id,
            scope="checkpoint",
            status="checkpoint_requeued",
            coverage_entry_count=2,
            idempotency_key="lost-checkpoint",
        )
    )
    ledger.update_memory_durable_receipt(lost.receipt_id, updated_at=now_ms() - ELEVEN_MINUTES_MS)
    fresh = ledger.upsert_memory_durable_receipt(
        MemoryDurableReceipt(
            session_key=session.session_key,
            session_id=session.session_id,
            scope="checkpoint",
            status="checkpoint_requeued",
            idempotency_key="fresh-requeue",
        )
    )
    repair_row("repair_failed")
    plan = create_requeue_plan(filters={"status": "repair_failed"}, receipt_ids=None, actor=ALICE)
    RequeuePlan.objects.filter(pk=plan.plan_id).update(
        state="queued", updated_at=now_ms() - task_limits.LOST_PLAN_AFTER_SECONDS * 1000
    )

    with django_capture_on_commit_callbacks(execute=True):
        result = tasks.repair_tick.delay().get()

    assert [p["receiptId"] for p in result["repair"]["processed"]] == [due.receipt_id]
    backed_off = _fresh(due)
    assert (backed_off.status, backed_off.attempt_count) == ("repair_pending", 1)
    assert backed_off.next_retry_at_ms is not None and backed_off.next_retry_at_ms > now_ms()
    assert result["swept"] == {
        "outbox_resent": [],  # every message sent through enqueue finished
        "checkpoints_resent": [lost.receipt_id],
        "plans_resent": [plan.plan_id],
    }
    assert _fresh(lost).status == "checkpoint_recovered"
    assert _fresh(fresh).status == "checkpoint_requeued"  # not lost yet, left alone
    assert RequeuePlan.objects.get(pk=plan.plan_id).state == "done"
    assert ReceiptEvent.objects.filter(receipt_id=lost.receipt_id, action="requeue_resent").exists()

    # The next tick finds nothing left to resend.
    with django_capture_on_commit_callbacks(execute=True):
        again = tasks.repair_tick.delay().get()
    assert again["swept"] == {"outbox_resent": [], "checkpoints_resent": [], "plans_resent": []}


def test_flush_task_flushes_that_session_under_the_turn_id_it_was_given(workspace):
    session = make_session(messages=2)
    tasks.flush_session.delay(session.session_key, turn_id="t-1").get()
    # No flush provider configured: the transcript is archived raw and a repair is queued,
    # both rows under the session's live generation and the given turn id.
    rows = MemoryDurableReceipt.objects.filter(session_key=session.session_key)
    assert sorted(rows.values_list("scope", "status", "turn_id", "session_id")) == [
        ("preimage", "preimage_saved", "t-1", session.session_id),
        ("repair", "repair_pending", "t-1", session.session_id),
    ]
    archive = workspace / rows.get(scope="preimage").target_path
    assert archive.is_file()


def test_every_message_the_services_send_names_a_registered_task():
    # enqueue knows the tasks only by name (it never imports tasks.py): a rename on one side
    # must fail here, not as an unregistered task in a worker's log.
    for short_name in enqueue.TASKS:
        registered = celery_app.tasks[enqueue.task_name(short_name)]
        assert registered is getattr(tasks, short_name)._get_current_object()
