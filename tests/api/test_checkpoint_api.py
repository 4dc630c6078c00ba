"""GET /api/v1/receipts/{id}/checkpoint: the conversation, the comparison, the loss, the errors."""

from __future__ import annotations

import json

import pytest

from receipts_app.checkpoint import record_memory_checkpoint
from receipts_app.schemas import CheckpointReadbackOut
from sessions_app import services as session_services
from sessions_app.models import TranscriptEntry
from tests.factories import make_receipt, make_session

from .conftest import assert_error

pytestmark = pytest.mark.django_db


def _saved(messages: int = 3):
    session = make_session(messages=messages)
    session_services.append_message(
        session.session_key,
        role="assistant",
        content="<script>x</script>",
        tool_calls=[{"id": "call-1", "function": {"name": "read", "arguments": '{"p": 1}'}}],
    )
    return session, record_memory_checkpoint(session.session_key)


def test_the_conversation_and_the_comparison(reader, workspace):
    session, saved = _saved()
    entries = list(TranscriptEntry.objects.filter(session_id=session.session_id).order_by("id"))
    entries[0].delete()
    later = session_services.append_message(session.session_key, role="user", content="later")

    response = reader.get(f"/receipts/{saved.receipt_id}/checkpoint")

    assert response.status_code == 200, response.content
    body = response.json()
    CheckpointReadbackOut.model_validate(body)
    assert body["entry_count"] == 4 and body["event_count"] == 5
    assert body["file"]["hash_matches"] is True and body["file"]["state"] == "whole"
    stored = (workspace / saved.source_path).read_text("utf-8").splitlines()
    events = [json.loads(line) for line in stored]
    flat = [event for entry in body["entries"] for event in [entry, *entry["tool_calls"]]]
    assert [(e["role"], e["content"], e["event_id"]) for e in flat] == [
        (e["role"], e["content"], e["event_id"]) for e in events
    ]
    assert body["entries"][-1]["tool_calls"][0]["tool_name"] == "read"
    assert body["entries"][0]["transcript_entry"] is None
    assert body["entries"][1]["transcript_entry"] == str(entries[1].id)
    comparison = body["comparison"]
    assert (comparison["same"], comparison["checkpoint_only"], comparison["transcript_only"]) == (
        3,
        1,
        1,
    )
    assert [t["entry"] for t in comparison["transcript_only_entries"]] == [str(later.id)]
    assert body["loss"] is None


def test_paging(reader, workspace):
    _session, saved = _saved(messages=6)
    body = reader.get(f"/receipts/{saved.receipt_id}/checkpoint", {"offset": 2, "limit": 3}).json()
    assert [e["position"] for e in body["entries"]] == [3, 4, 5]
    assert body["next_offset"] == 5
    assert reader.get(f"/receipts/{saved.receipt_id}/checkpoint", {"limit": 0}).status_code == 422


def test_downloads(reader, workspace):
    _session, saved = _saved()
    jsonl = reader.get(f"/receipts/{saved.receipt_id}/checkpoint/jsonl")
    assert jsonl.status_code == 200
    assert b"".join(jsonl.streaming_content) == (workspace / saved.source_path).read_bytes()
    md = reader.get(f"/receipts/{saved.receipt_id}/checkpoint/markdown")
    assert md.status_code == 200
    assert "<script>x</script>" in b"".join(md.streaming_content).decode()


def test_errors(reader, workspace, settings):
    assert_error(reader.get("/receipts/no-such/checkpoint"), 404, "not_found")
    assert_error(reader.get("/receipts/no-such/checkpoint/jsonl"), 404, "not_found")
    flush = make_receipt(scope="flush", status="flush_done", source_path="session:a:b")
    assert_error(reader.get(f"/receipts/{flush.receipt_id}/checkpoint"), 422, "not_a_checkpoint")
    failed = make_receipt(status="checkpoint_failed", reason="disk full")
    assert_error(reader.get(f"/receipts/{failed.receipt_id}/checkpoint"), 422, "not_a_checkpoint")

    session, saved = _saved()
    (workspace / saved.source_path).unlink()
    body = assert_error(
        reader.get(f"/receipts/{saved.receipt_id}/checkpoint"), 409, "checkpoint_missing"
    )
    assert body["loss"]["lost_count"] == 0 and body["loss"]["retake_possible"] is True
    assert_error(
        reader.get(f"/receipts/{saved.receipt_id}/checkpoint/markdown"), 409, "checkpoint_missing"
    )

    (workspace / saved.source_path).write_bytes(b"not json at all\n")
    assert_error(
        reader.get(f"/receipts/{saved.receipt_id}/checkpoint"), 409, "checkpoint_unreadable"
    )

    settings.OPENSQUILLA_GATEWAY = "edge-c"
    body = assert_error(
        reader.get(f"/receipts/{saved.receipt_id}/checkpoint"), 409, "checkpoint_elsewhere"
    )
    assert "gateway local" in body["detail"]


def test_needs_a_token(anonymous, workspace):
    _session, saved = _saved()
    assert anonymous.get(f"/receipts/{saved.receipt_id}/checkpoint").status_code == 401


def test_query_count_does_not_grow_with_entries(reader, workspace):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def count(messages: int) -> int:
        _session, saved = _saved(messages=messages)
        with CaptureQueriesContext(connection) as ctx:
            assert reader.get(f"/receipts/{saved.receipt_id}/checkpoint").status_code == 200
        return len(ctx.captured_queries)

    count(1)  # the token's first use of the test writes its last-used stamp once
    assert count(2) == count(80)
