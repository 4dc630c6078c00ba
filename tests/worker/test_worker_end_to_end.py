"""Durable work end to end through a real Celery worker process.

Each test starts its own worker on a private queue, pushes work the way the product does
(a task ``.delay`` or a service that enqueues after commit), and waits for the ledger to
reach the final state.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from receipts_app import checkpoint, flush_runtime, ledger, tasks
from receipts_app.audit import Actor
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent
from tests.factories import make_session
from tests.worker.conftest import service_marks, stub_provider_env, wait_for

pytestmark = [
    *service_marks(),
    pytest.mark.django_db(transaction=True),
]

THIRTY_ONE_MINUTES_MS = 31 * 60 * 1000


def row(receipt_id: str) -> MemoryDurableReceipt:
    return ledger.get_memory_durable_receipt(receipt_id)


def rows_of(session_key: str) -> list[MemoryDurableReceipt]:
    return list(MemoryDurableReceipt.objects.filter(session_key=session_key).order_by("id"))


def degraded_flush_in_process(session_key: str) -> MemoryDurableReceipt:
    """A flush with no provider, run here: it leaves a repair row and its raw archive."""
    flush_runtime.flush_session(session_key)
    return MemoryDurableReceipt.objects.get(session_key=session_key, scope="repair")


def test_checkpoint_task_writes_receipt_and_jsonl(start_worker, shared_workspaces):
    session = make_session(messages=3)
    start_worker()

    tasks.checkpoint_session.delay(session.session_key)

    saved = wait_for(
        lambda: MemoryDurableReceipt.objects.filter(
            session_key=session.session_key, status="checkpoint_saved"
        ).first(),
        what="checkpoint_saved written by the worker",
    )
    assert saved.session_id == session.session_id
    assert saved.coverage_entry_count == 3
    jsonl = shared_workspaces.checkpoint / saved.source_path
    assert len(jsonl.read_text(encoding="utf-8").splitlines()) == 3


def test_flush_task_without_provider_degrades_to_repair_receipt(start_worker, shared_workspaces):
    session = make_session(messages=2)
    start_worker()

    tasks.flush_session.delay(session.session_key)

    wait_for(
        lambda: len(rows_of(session.session_key)) >= 2,
        what="the worker's flush rows",
    )
    preimage, repair_row = rows_of(session.session_key)
    assert (preimage.scope, preimage.status) == ("preimage", "preimage_saved")
    assert (repair_row.scope, repair_row.status, repair_row.reason) == (
        "repair",
        "repair_pending",
        "ok_archive_only",
    )
    assert (shared_workspaces.memory / repair_row.target_path).is_file()

    # Delivered twice: the idempotency keys make the second run change nothing.
    before = [(r.receipt_id, r.status) for r in rows_of(session.session_key)]
    tasks.flush_session.delay(session.session_key)
    tasks.checkpoint_session.delay(session.session_key)
    wait_for(
        lambda: MemoryDurableReceipt.objects.filter(
            session_key=session.session_key, status="checkpoint_saved"
        ).exists(),
        what="a later task, proving the second flush ran first",
    )
    after = [
        (r.receipt_id, r.status) for r in rows_of(session.session_key) if r.scope != "checkpoint"
    ]
    assert after == before


def test_repair_tick_claims_and_finishes_a_degraded_flush(
    start_worker, shared_workspaces, stub_llm
):
    session = make_session(messages=2)
    pending = degraded_flush_in_process(session.session_key)
    start_worker(**stub_provider_env(stub_llm))

    tasks.repair_tick.delay()

    done = wait_for(
        lambda: (r := row(pending.receipt_id)).status == "repair_done" and r,
        what="repair_done after the tick",
    )
    assert stub_llm.requests >= 1
    assert done.next_retry_at_ms is None
    actions = list(
        ReceiptEvent.objects.filter(receipt_id=pending.receipt_id).values_list(
            "action", "to_status", "surface"
        )
    )
    assert ("claim", "repair_running", "worker") in actions
    assert ("status_change", "repair_done", "worker") in actions
    notes = [p for p in (shared_workspaces.memory / "memory").glob("*.md")]
    assert any("The team deploys on Fridays." in p.read_text() for p in notes)


def test_requeued_checkpoint_failure_ends_recovered(start_worker, shared_workspaces, settings):
    from receipts_app.requeue import requeue_receipt

    session = make_session(messages=2)
    # First attempt with no workspace configured: a recorded checkpoint_failed receipt.
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = None
    with pytest.raises(RuntimeError, match="not configured"):
        checkpoint.record_memory_checkpoint(session.session_key)
    failed = MemoryDurableReceipt.objects.get(
        session_key=session.session_key, status="checkpoint_failed"
    )
    start_worker()  # this worker has the workspace

    result = requeue_receipt(
        receipt_id=failed.receipt_id,
        actor=Actor("alice", "console"),
        reason="workspace configured",
        expected_status=failed.status,
        expected_updated_at=failed.updated_at,
    )
    assert str(result.outcome) == "requeued"

    recovered = wait_for(
        lambda: (r := row(failed.receipt_id)).status == "checkpoint_recovered" and r,
        what="checkpoint_recovered",
    )
    saved = row(recovered.resolved_by_receipt_id)
    assert (saved.status, saved.session_id) == ("checkpoint_saved", session.session_id)
    assert (shared_workspaces.checkpoint / saved.source_path).is_file()


def test_killed_worker_leaves_a_claim_that_recovery_returns_and_a_new_worker_finishes(
    start_worker, shared_workspaces, stub_llm
):
    session = make_session(messages=2)
    pending = degraded_flush_in_process(session.session_key)
    stub_llm.mode = "hang"
    first = start_worker(**stub_provider_env(stub_llm))

    tasks.repair_receipt.delay(pending.receipt_id)

    # The worker claimed the row and is waiting on the model: kill it mid-task.
    wait_for(lambda: stub_llm.received.is_set(), what="the worker to call the model")
    assert row(pending.receipt_id).status == "repair_running"
    first.kill_hard()
    assert first.process.returncode is not None
    assert row(pending.receipt_id).status == "repair_running"  # nobody is coming back for it

    # Thirty minutes pass (simulated by ageing the claim, never by sleeping).
    ledger.update_memory_durable_receipt(
        pending.receipt_id, updated_at=row(pending.receipt_id).updated_at - THIRTY_ONE_MINUTES_MS
    )
    stub_llm.mode = "good"
    stub_llm.release.set()
    start_worker(**stub_provider_env(stub_llm))

    tasks.repair_tick.delay()
    recovered = wait_for(
        lambda: (r := row(pending.receipt_id)).reason == "stale_repair_claim" and r,
        what="stale recovery by the new worker's tick",
    )
    assert recovered.status in {"repair_pending", "repair_done"}

    # The recovered row backs off five minutes; let that pass too, then the next tick runs it.
    if recovered.status == "repair_pending":
        ledger.update_memory_durable_receipt(
            pending.receipt_id, next_retry_at_ms=recovered.updated_at - 1
        )
        tasks.repair_tick.delay()
    wait_for(
        lambda: row(pending.receipt_id).status == "repair_done",
        what="repair_done by the second worker",
    )
    assert Path(shared_workspaces.memory / "memory").is_dir()
