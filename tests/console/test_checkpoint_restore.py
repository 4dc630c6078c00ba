"""The console's restore page, its downloads, and the loss on the receipt page."""

from __future__ import annotations

import hashlib

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from receipts_app.checkpoint import record_memory_checkpoint
from sessions_app import services as session_services
from sessions_app.models import TranscriptEntry
from tests.factories import make_receipt, make_session
from tests.receipts_app.test_restore import golden_bodies, saved_receipt_for

pytestmark = pytest.mark.django_db


def _page(client, receipt, **params):
    return client.get(reverse("receipts:checkpoint", args=[receipt.receipt_id]), params)


def test_golden_checkpoints_render_every_event(viewer_client, workspace, golden_dir):
    import html
    import json

    for name, body in golden_bodies(golden_dir):
        receipt = saved_receipt_for(workspace, body, name=name)
        response = _page(viewer_client, receipt, limit=500)
        assert response.status_code == 200, name
        page = response.content.decode()
        for line in body.decode("utf-8").splitlines():
            event = json.loads(line)
            assert html.escape(event["content"]) in page, (name, event["sequence"])


def test_content_is_escaped_not_markup(viewer_client, workspace):
    session = make_session()
    session_services.append_message(
        session.session_key, role="user", content="<script>alert('x')</script> & <b>bold</b>"
    )
    saved = record_memory_checkpoint(session.session_key)
    page = _page(viewer_client, saved).content.decode()
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in page


def test_downloads_are_the_file_and_its_markdown(viewer_client, workspace):
    session = make_session(messages=3)
    session_services.append_message(
        session.session_key,
        role="assistant",
        content="```fence``` inside",
        tool_calls=[{"id": "c1", "function": {"name": "grep", "arguments": "{}"}}],
    )
    saved = record_memory_checkpoint(session.session_key)
    stored = (workspace / saved.source_path).read_bytes()
    jsonl = viewer_client.get(reverse("receipts:checkpoint_jsonl", args=[saved.receipt_id]))
    assert jsonl.status_code == 200
    body = b"".join(jsonl.streaming_content)
    assert body == stored
    assert hashlib.sha256(body).hexdigest() == saved.content_hash
    assert "attachment" in jsonl["Content-Disposition"]
    md = viewer_client.get(reverse("receipts:checkpoint_markdown", args=[saved.receipt_id]))
    text = b"".join(md.streaming_content).decode()
    assert md["Content-Type"].startswith("text/markdown")
    assert "## 1. user" in text and "message 0" in text
    assert "### Tool call: grep `c1`" in text
    # The content's own triple backticks cannot close the block they are in.
    assert "````text\n```fence``` inside\n````" in text


def test_page_compares_and_pages(viewer_client, workspace):
    session = make_session(messages=5)
    saved = record_memory_checkpoint(session.session_key)
    first = TranscriptEntry.objects.filter(session_id=session.session_id).order_by("id").first()
    first.delete()
    session_services.append_message(session.session_key, role="user", content="fresh")
    page = _page(viewer_client, saved, limit=2).content.decode()
    assert 'data-count="same">4<' in page
    assert 'data-count="checkpoint-only">1 ' in page
    assert 'data-count="transcript-only">1 ' in page
    assert "Showing entries 1–2 of 5" in page
    assert 'data-position="1" data-match="checkpoint-only"' in page
    assert 'data-position="2" data-match="both"' in page
    assert "fresh" in page  # listed as only in the transcript


def test_missing_file_names_the_loss_on_both_pages(operator_client, workspace):
    session = make_session(messages=4)
    saved = record_memory_checkpoint(session.session_key)
    entries = list(TranscriptEntry.objects.filter(session_id=session.session_id).order_by("id"))
    TranscriptEntry.objects.filter(pk__in=[e.pk for e in entries[:3]]).delete()
    (workspace / saved.source_path).unlink()
    page = _page(operator_client, saved)
    assert page.status_code == 200
    text = page.content.decode()
    assert 'data-problem="checkpoint_missing"' in text
    assert 'data-lost="3"' in text
    assert "3 of 4 entries this checkpoint covered are in no transcript" in text
    detail = operator_client.get(reverse("receipts:detail", args=[saved.receipt_id]))
    text = detail.content.decode()
    assert 'data-file-state="missing"' in text
    assert 'data-lost="3"' in text
    # Downloads say why, without a 500.
    response = operator_client.get(reverse("receipts:checkpoint_jsonl", args=[saved.receipt_id]))
    assert response.status_code == 409


def test_nothing_lost_while_transcript_whole(viewer_client, workspace):
    session = make_session(messages=3)
    saved = record_memory_checkpoint(session.session_key)
    (workspace / saved.source_path).unlink()
    text = viewer_client.get(reverse("receipts:detail", args=[saved.receipt_id])).content.decode()
    assert 'data-lost="0"' in text
    assert "Nothing is lost: all 3 entries" in text
    assert "retake" in text and "possible" in text


def test_another_gateways_checkpoint_says_where_it_is(viewer_client, workspace, settings):
    session = make_session(messages=2)
    saved = record_memory_checkpoint(session.session_key)
    settings.OPENSQUILLA_GATEWAY = "edge-b"
    text = _page(viewer_client, saved).content.decode()
    assert 'data-problem="checkpoint_elsewhere"' in text
    assert "OPENSQUILLA_GATEWAY=local" in text
    detail = viewer_client.get(reverse("receipts:detail", args=[saved.receipt_id]))
    assert detail.status_code == 200
    assert 'data-file-state="elsewhere"' in detail.content.decode()


def test_unknown_and_non_checkpoint_receipts(viewer_client, workspace):
    missing = viewer_client.get(reverse("receipts:checkpoint", args=["nope"]))
    assert missing.status_code == 404
    flush = make_receipt(scope="flush", status="flush_done", source_path="session:a:b")
    assert _page(viewer_client, flush).status_code == 422


def test_restore_page_query_count_does_not_grow_with_entries(viewer_client, workspace):
    def count(messages: int) -> int:
        session = make_session(messages=messages)
        saved = record_memory_checkpoint(session.session_key)
        with CaptureQueriesContext(connection) as ctx:
            assert _page(viewer_client, saved).status_code == 200
        return len(ctx.captured_queries)

    assert count(3) == count(60)
