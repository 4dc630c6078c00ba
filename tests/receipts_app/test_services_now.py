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
