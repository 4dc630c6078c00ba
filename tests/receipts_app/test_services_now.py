"""In-process triggers: the receipt a checkpoint or flush left, whatever happened."""

from __future__ import annotations

import pytest

from receipts_app.audit import Actor
from receipts_app.models import ReceiptEvent
from receipts_app.services import checkpoint_now, flush_now
from tests.factories import make_session

pytestmark = pytest.mark.django_db(transaction=True)
ALICE = Actor("alice", "api")


def test_checkpoint_now_returns_the_saved_receipt(workspace):
    session = make_session("agent:main:webchat:now", messages=2)
    receipt = checkpoint_now(session_key=session.session_key, actor=ALICE)
    assert receipt.status == "checkpoint_saved"
    assert (workspace / receipt.source_path).is_file()
    trigger = ReceiptEvent.objects.get(action="checkpoint_now")
    assert (trigger.actor, trigger.outcome) == ("alice", "in_process")


def test_checkpoint_now_returns_the_failure_receipt_with_the_real_reason(settings):
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = None
    session = make_session("agent:main:webchat:noworkspace", messages=1)
    receipt = checkpoint_now(session_key=session.session_key, actor=ALICE)
    assert receipt.status == "checkpoint_failed"
    assert receipt.reason == "checkpoint workspace_dir is not configured"


def test_checkpoint_now_unknown_session_is_a_key_error(workspace):
    with pytest.raises(KeyError, match="Session not found"):
        checkpoint_now(session_key="agent:main:missing", actor=ALICE)


def test_flush_now_returns_the_rows_it_wrote_attributed_to_the_caller(workspace, settings):
    settings.OPENSQUILLA_MEMORY_WORKSPACE = str(workspace)
    session = make_session("agent:main:webchat:flushnow", messages=2)
    outcome, rows = flush_now(session_key=session.session_key, actor=ALICE)
    assert outcome.result_status == "ok_archive_only"  # provider "none": archived for repair
    assert [(r.scope, r.status) for r in rows] == [
        ("preimage", "preimage_saved"),
        ("repair", "repair_pending"),
    ]
    with pytest.raises(KeyError):
        flush_now(session_key="agent:main:missing", actor=ALICE)
    # The operator's action is in the audit log even though nothing was queued.
    trigger = ReceiptEvent.objects.get(action="flush_now")
    assert (trigger.actor, trigger.surface, trigger.outcome) == ("alice", "api", "in_process")


def test_a_covering_checkpoint_resolves_the_sessions_older_failures(workspace, settings, tmp_path):
    """Issue 22: after "Checkpoint now" said "Covered.", the older checkpoint_failed stayed
    failed and counted at risk."""
    from receipts_app.counts import receipt_counts
    from receipts_app.health import at_risk_by_gateway_agent
    from receipts_app.models import MemoryDurableReceipt
    from receipts_app.services import take_checkpoint
    from sessions_app.services import append_message, reset_session

    session = make_session("agent:main:webchat:covered", messages=2)
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = None  # the disk is "gone": two failures
    first = checkpoint_now(session_key=session.session_key, actor=ALICE)
    append_message(session.session_key, role="user", content="one more")
    second = checkpoint_now(session_key=session.session_key, actor=ALICE)
    other = make_session("agent:main:webchat:other", messages=1)
    elsewhere = checkpoint_now(session_key=other.session_key, actor=ALICE)
    assert {first.status, second.status, elsewhere.status} == {"checkpoint_failed"}
    assert at_risk_by_gateway_agent(receipt_counts()) == {("local", "main"): 3}

    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(workspace)
    saved = checkpoint_now(session_key=session.session_key, actor=ALICE)

    def status(row):
        return MemoryDurableReceipt.objects.get(pk=row.pk)

    for failed in (first, second):
        row = status(failed)
        assert (row.status, row.resolved_by_receipt_id) == (
            "checkpoint_superseded",
            saved.receipt_id,
        )
        event = ReceiptEvent.objects.get(receipt_id=failed.receipt_id, action="supersede")
        assert (event.actor, event.from_status, event.to_status) == (
            "alice",
            "checkpoint_failed",
            "checkpoint_superseded",
        )
    assert status(elsewhere).status == "checkpoint_failed"  # another session: not covered
    assert status(saved).status == "checkpoint_saved"  # the save itself is upstream's
    assert at_risk_by_gateway_agent(receipt_counts()) == {("local", "main"): 1}

    # A failure of an older generation is not covered by the new one's checkpoint.
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = None
    stale = checkpoint_now(session_key=other.session_key, actor=ALICE)
    reset_session(other.session_key)
    append_message(other.session_key, role="user", content="fresh start")
    fresh = checkpoint_now(session_key=other.session_key, actor=ALICE)
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(workspace)
    take_checkpoint(session_key=other.session_key)  # the queued "Checkpoint now", a worker
    assert status(fresh).status == "checkpoint_superseded"
    assert ReceiptEvent.objects.get(receipt_id=fresh.receipt_id, action="supersede").actor == (
        "worker"
    )
    assert status(stale).status == "checkpoint_failed"
    assert status(elsewhere).status == "checkpoint_failed"
