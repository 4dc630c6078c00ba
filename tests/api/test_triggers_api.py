"""Checkpoint and flush triggers (202 + task id, or ``?wait=true`` for the receipt) and coverage."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from receipts_app import checkpoint
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent
from tests.api.conftest import API, assert_error
from tests.factories import make_session

pytestmark = pytest.mark.django_db

KEY = "agent:main:webchat:trigger/1"


def test_checkpoint_is_queued_after_commit_with_a_task_id_and_a_link(
    operator, django_capture_on_commit_callbacks, monkeypatch
):
    make_session(KEY, messages=2)
    sent = []
    monkeypatch.setattr(
        "receipts_app.enqueue._send",
        lambda name, task_id, a, kw: sent.append((name, task_id, a)),
    )
    with django_capture_on_commit_callbacks(execute=True):
        response = operator.post(f"/sessions/{KEY}/checkpoints", {"turn_id": "turn-9"})
    assert response.status_code == 202
    body = response.json()
    assert sent == [("checkpoint_session", body["task_id"], (KEY,))]
    link = urlsplit(body["status_url"])
    assert link.path == f"{API}/receipts"
    assert parse_qs(link.query)["session_key"] == [KEY]
    assert operator.get(body["status_url"][len(API) :]).status_code == 200
    trigger = ReceiptEvent.objects.get(action="checkpoint_now")
    assert trigger.surface == "api" and trigger.details["task_id"] == body["task_id"]


def test_checkpoint_wait_returns_the_saved_receipt_and_coverage_follows(operator, workspace):
    make_session(KEY, messages=3)
    assert operator.get(f"/sessions/{KEY}/coverage").json()["covered"] is False
    response = operator.post(f"/sessions/{KEY}/checkpoints?wait=true")
    assert response.status_code == 200
    receipt = response.json()
    assert receipt["status"] == "checkpoint_saved" and receipt["coverage_entry_count"] == 3
    assert (workspace / receipt["source_path"]).is_file()

    coverage = operator.get(f"/sessions/{KEY}/coverage").json()
    assert (
        coverage["covered"] is True and coverage["receipt"]["receipt_id"] == receipt["receipt_id"]
    )
    operator.post(f"/sessions/{KEY}/messages", {"role": "user", "content": "later"})
    assert operator.get(f"/sessions/{KEY}/coverage").json()["covered"] is False


def test_checkpoint_wait_returns_the_failure_receipt(operator, workspace, monkeypatch):
    make_session(KEY, messages=1)

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint, "append_checkpoint_events", broken)
    response = operator.post(f"/sessions/{KEY}/checkpoints?wait=true")
    assert response.status_code == 200
    assert response.json()["status"] == "checkpoint_failed"
    assert response.json()["reason"] == "disk full"


def test_checkpoint_errors(operator, workspace):
    make_session(KEY)
    assert_error(operator.post(f"/sessions/{KEY}/checkpoints"), 422, "validation_error")
    assert_error(operator.post(f"/sessions/{KEY}/checkpoints?wait=true"), 422, "validation_error")
    assert_error(operator.post("/sessions/agent:main:nope/checkpoints"), 404, "not_found")
    assert_error(operator.post("/sessions/agent:main:nope/checkpoints?wait=1"), 404, "not_found")
    assert_error(operator.get("/sessions/agent:main:nope/coverage"), 404, "not_found")
    assert not MemoryDurableReceipt.objects.exists()


def test_flush_is_queued_with_a_task_id(operator, monkeypatch, django_capture_on_commit_callbacks):
    make_session(KEY, messages=2)
    sent = []
    monkeypatch.setattr(
        "receipts_app.enqueue._send",
        lambda name, task_id, a, kw: sent.append((name, task_id)),
    )
    with django_capture_on_commit_callbacks(execute=True):
        response = operator.post(f"/sessions/{KEY}/flush")
    assert response.status_code == 202
    assert sent == [("flush_session", response.json()["task_id"])]
    assert_error(operator.post("/sessions/agent:main:nope/flush"), 404, "not_found")


def test_flush_wait_returns_the_outcome_and_its_ledger_rows(operator, workspace):
    make_session(KEY, messages=2)
    response = operator.post(f"/sessions/{KEY}/flush?wait=true")
    assert response.status_code == 200, response.content
    body = response.json()
    # With no LLM provider configured the flush degrades to a raw archive plus a repair row.
    assert body["mode"] == "raw" and body["raw_reason"] == "no_provider"
    assert {r["status"] for r in body["receipts"]} == {"preimage_saved", "repair_pending"}
    stored = set(MemoryDurableReceipt.objects.values_list("receipt_id", flat=True))
    assert {r["receipt_id"] for r in body["receipts"]} == stored
    assert_error(operator.post("/sessions/agent:main:nope/flush?wait=true"), 404, "not_found")
