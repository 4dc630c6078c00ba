"""Every console page in both modes: a full page, and the fragment htmx asks for."""

from __future__ import annotations

import html
import re
from functools import partial

import pytest
from django.urls import reverse

from opensquilla_site.timeutil import now_ms
from receipts_app.audit import Actor, record_event
from receipts_app.tasks import fold_ledger_aggregates
from tests.factories import make_receipt, make_session

from .conftest import hx

pytestmark = pytest.mark.django_db


def _failed(**extra):
    fields = {
        "session_key": "agent:main:webchat:alpha",
        "status": "checkpoint_failed",
        "reason": "[Errno 28] No space left on device: '/srv/ws/memory/.checkpoints/a/t1.jsonl'",
        "attempt_count": 1,
    }
    fields.update(extra)
    return make_receipt(**fields)


def test_overview_full_page_shows_failures_health_groups_and_chart(viewer_client):
    _failed()
    _failed(reason="[Errno 28] No space left on device: '/srv/ws/memory/.checkpoints/b/t9.jsonl'")
    make_receipt(status="checkpoint_saved", session_key="agent:ops:cli:x")
    # Before the beat task folds them, the two failures are announced, not yet grouped.
    body = viewer_client.get(reverse("receipts:overview")).content.decode()
    assert "2 changes arrived in the last seconds" in body
    assert 'class="failure-group"' not in body
    fold_ledger_aggregates()
    response = viewer_client.get(reverse("receipts:overview"))
    body = response.content.decode()
    assert response.status_code == 200
    assert "arrived in the last seconds" not in body
    assert "<html" in body
    # htmx is loaded from our own static files (never a CDN), so the live regions work.
    assert re.search(r'<script[^>]*src="/static/[^"]*htmx[^"]*\.js"', body)
    assert "checkpoint_failed" in body
    # Two failures with different paths fall into one masked group with count 2.
    assert "No space left on device: &#x27;&lt;path&gt;&#x27;" in body
    assert 'class="failure-group"' in body and '<td class="num">2</td>' in body
    assert "<svg" in body and "bar-failed" in body
    for agent in ("ops", "main"):  # each card names its agent, linking to the agent's page
        assert re.search(
            rf'Agent <a href="/agents/{agent}/[^"]*"[^>]*><code>{agent}</code></a>', body
        )


def test_overview_fragment_is_the_body_only(viewer_client):
    _failed()
    response = viewer_client.get(reverse("receipts:overview"), **hx("overview-body"))
    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith('<div id="overview-body"')
    assert "<html" not in body


def test_receipt_list_full_and_fragment(viewer_client):
    row = _failed()
    url = reverse("receipts:list") + "?status=checkpoint_failed"
    full = viewer_client.get(url).content.decode()
    assert "<html" in full and row.receipt_id in full
    fragment = viewer_client.get(url, **hx("receipt-table")).content.decode()
    assert fragment.lstrip().startswith('<div id="receipt-table"')
    assert "<html" not in fragment and row.receipt_id in fragment


def test_receipt_list_filters_by_every_field_in_the_url(viewer_client):
    hit = _failed(session_key="agent:main:webchat:keep", attempt_count=3, scope="checkpoint")
    miss = _failed(session_key="agent:main:webchat:drop", attempt_count=0)
    base = reverse("receipts:list")
    for query in (
        "?session_key_prefix=agent:main:webchat:ke",
        "?attempts_min=2",
        "?attempts_min=3&attempts_max=3&scope=checkpoint&agent=main",
        f"?created_from={hit.created_at}",
    ):
        body = viewer_client.get(base + query).content.decode()
        assert hit.receipt_id in body, query
        if "created_from" not in query:
            assert miss.receipt_id not in body, query


def test_receipt_list_accepts_dates_for_time_ranges(viewer_client):
    row = _failed()
    body = viewer_client.get(
        reverse("receipts:list") + "?created_from=2000-01-01&created_to=2999-01-01T00:00"
    ).content.decode()
    assert row.receipt_id in body
    body = viewer_client.get(reverse("receipts:list") + "?created_to=2000-01-01").content.decode()
    assert row.receipt_id not in body


def test_status_tabs_under_a_text_filter_show_capped_counts(viewer_client, monkeypatch):
    from receipts_app.console.views import receipts as views

    for _ in range(4):
        _failed()
    # A cap of 2 stands in for 10,000: counting stops there and the tab says "2+".
    monkeypatch.setattr(views, "tab_counts", partial(views.tab_counts, cap=2))
    monkeypatch.setattr(views, "COUNT_CAP", 2)
    monkeypatch.setattr("receipts_app.console.templatetags.COUNT_CAP", 2)
    body = viewer_client.get(reverse("receipts:list") + "?reason=space").content.decode()
    assert 'checkpoint_failed <span class="count">2+</span>' in body
    assert ">2+</span> matching" in body


def test_status_tabs_of_agent_scope_status_filters_are_exact(viewer_client, monkeypatch):
    """Those filters read the counts table: the exact number, past any cap."""
    from receipts_app.console.views import receipts as views

    for _ in range(4):
        _failed()
    monkeypatch.setattr(views, "COUNT_CAP", 2)
    monkeypatch.setattr("receipts_app.console.templatetags.COUNT_CAP", 2)
    for query in ("", "?agent=main", "?scope=checkpoint&status=checkpoint_failed"):
        body = viewer_client.get(reverse("receipts:list") + query).content.decode()
        assert 'checkpoint_failed <span class="count">4</span>' in body, query
        assert ">4</span> matching" in body, query


def test_new_count_banner_counts_rows_above_the_first_row(viewer_client):
    first = _failed()
    response = viewer_client.get(reverse("receipts:list"))
    marker = response.context["newest_marker"]
    assert marker
    body = viewer_client.get(
        reverse("receipts:new_count") + f"?since={marker}", **hx("new-banner")
    ).content.decode()
    assert "new receipt" not in body
    _failed()
    _failed()
    body = viewer_client.get(
        reverse("receipts:new_count") + f"?since={marker}", **hx("new-banner")
    ).content.decode()
    assert "2 new receipts" in body
    # The table itself was not reshuffled: the rows are only offered.
    assert first.receipt_id not in body


def test_receipt_detail_full_and_fragment(viewer_client, workspace):
    session = make_session("agent:main:webchat:det", messages=2)
    saved = make_receipt(
        session_key=session.session_key,
        session_id=session.session_id,
        turn_id="t1",
        status="checkpoint_saved",
        idempotency_key=f"checkpoint:{session.session_key}:t1:abc",
        source_path="memory/.checkpoints/x/t1.jsonl",
    )
    failed = make_receipt(
        session_key=session.session_key,
        session_id=session.session_id,
        turn_id="t1",
        status="checkpoint_failed",
        reason="disk full",
        idempotency_key=f"checkpoint:{session.session_key}:t1:abc:failed:0011",
        resolved_by_receipt_id=saved.receipt_id,
        next_retry_at_ms=1_738_324_800_000,  # 2025-01-31T12:00:00Z
    )
    target = workspace / "memory/.checkpoints/x"
    target.mkdir(parents=True)
    (target / "t1.jsonl").write_text('{"event": "<b>hello</b>"}\n')
    record_event(
        receipt_id=failed.receipt_id,
        action="requeue",
        outcome="requeued",
        reason="try again",
        actor=Actor("otto", "console"),
    )

    body = viewer_client.get(reverse("receipts:detail", args=[failed.receipt_id])).content.decode()
    assert "<html" in body
    # The retry time is shown as a date, with the stored milliseconds beside it.
    assert "2025-01-31 12:00:00 UTC" in body and "1738324800000" in body
    assert saved.receipt_id in body  # resolved_by link and family
    assert "try again" in body and "otto" in body  # timeline
    assert reverse("sessions:detail", args=[session.session_key]) in body

    saved_page = viewer_client.get(
        reverse("receipts:detail", args=[saved.receipt_id])
    ).content.decode()
    assert "&lt;b&gt;hello&lt;/b&gt;" in saved_page  # the preview is escaped
    # A checkpoint's file is read back on its own page (tests/console/test_checkpoint_restore.py).
    assert reverse("receipts:checkpoint", args=[saved.receipt_id]) in saved_page
    assert failed.receipt_id in saved_page  # "resolved by this receipt"

    fragment = viewer_client.get(
        reverse("receipts:detail", args=[failed.receipt_id]), **hx("receipt-detail")
    ).content.decode()
    assert fragment.lstrip().startswith('<div id="receipt-detail"')
    assert f'data-receipt-id="{failed.receipt_id}"' in fragment and "<html" not in fragment


def test_plans_pages(operator_client):
    _failed()
    response = operator_client.post(
        reverse("receipts:plan_create"), {"status": "checkpoint_failed", "all_matching": "1"}
    )
    assert response.status_code == 302
    detail = operator_client.get(response["Location"]).content.decode()
    assert "Dry run: 1 receipt" in detail and "Confirm and requeue 1 receipt" in detail
    listing = operator_client.get(reverse("receipts:plans")).content.decode()
    assert "previewed" in listing


def test_audit_log_full_and_fragment_filters_by_user_surface_action(viewer_client):
    record_event(
        receipt_id="r-1", action="requeue", outcome="requeued", actor=Actor("otto", "console")
    )
    record_event(
        receipt_id="r-2", action="acknowledge", outcome="acknowledged", actor=Actor("ada", "admin")
    )
    full = viewer_client.get(reverse("receipts:audit")).content.decode()
    assert "otto" in full and "ada" in full and "<html" in full
    fragment = viewer_client.get(
        reverse("receipts:audit") + "?surface=admin", **hx("audit-table")
    ).content.decode()
    assert fragment.lstrip().startswith('<div id="audit-table"')
    assert "acknowledge" in fragment and "r-1" not in fragment
    by_user = viewer_client.get(
        reverse("receipts:audit") + "?actor=otto&action=requeue"
    ).content.decode()
    assert "r-1" in by_user and "r-2" not in by_user


def test_audit_pager_swaps_only_the_table_and_pushes_its_url(viewer_client):
    for i in range(12):
        record_event(receipt_id=f"r-{i}", action="requeue", actor=Actor("otto", "console"))
    page = viewer_client.get(reverse("receipts:audit") + "?limit=10").content.decode()
    # "Older »" inherits its target from the table it sits in: without one, htmx would swap
    # the whole page into the link itself.
    table = page[page.index('<div id="audit-table"') :]
    opening = table[: table.index(">") + 1]
    assert 'hx-target="#audit-table"' in opening and 'hx-swap="outerHTML"' in opening
    assert 'hx-push-url="true"' in opening
    older = re.search(r'<a rel="next" href="([^"]+)" hx-get="([^"]+)"', table)
    assert older and older[1] == older[2] and "cursor=" in older[1]
    # The link works without JavaScript too: a plain GET of its href is the next page.
    url = html.unescape(older[1])
    plain = viewer_client.get(reverse("receipts:audit") + url).content.decode()
    assert "<html" in plain and "<code>r-0</code>" in plain and "<code>r-11</code>" not in plain
    swapped = viewer_client.get(reverse("receipts:audit") + url, **hx("audit-table"))
    body = swapped.content.decode()
    assert "<html" not in body and 'class="topbar"' not in body and "« Newest" in body


def test_sessions_list_search_and_detail(viewer_client):
    session = make_session("agent:main:webchat:findme", messages=3)
    make_session("agent:other:webchat:zzz")
    listing = viewer_client.get(reverse("sessions:list") + "?q=findme").content.decode()
    assert "findme" in listing and "zzz" not in listing
    by_agent = viewer_client.get(
        reverse("sessions:list") + "?agent=other", **hx("session-table")
    ).content.decode()
    assert by_agent.lstrip().startswith('<div id="session-table">') and "zzz" in by_agent
    detail = viewer_client.get(
        reverse("sessions:detail", args=[session.session_key])
    ).content.decode()
    assert "message 0" in detail and "message 2" in detail
    assert reverse("receipts:session_memory") in detail


def test_session_memory_panel_reports_exact_coverage(viewer_client, workspace):
    from receipts_app.checkpoint import record_memory_checkpoint

    session = make_session("agent:main:webchat:cov", messages=2)
    url = reverse("receipts:session_memory") + f"?key={session.session_key}"
    assert "Not covered" in viewer_client.get(url, **hx("session-memory")).content.decode()
    record_memory_checkpoint(session.session_key)
    body = viewer_client.get(url, **hx("session-memory")).content.decode()
    assert "Covered." in body
    # A later message makes the saved checkpoint stale: no longer covered.
    from sessions_app.services import append_message

    append_message(session.session_key, role="user", content="one more")
    assert "Not covered" in viewer_client.get(url).content.decode()


def test_long_transcript_content_is_collapsed(viewer_client):
    from sessions_app.services import append_message

    session = make_session("agent:main:webchat:long")
    append_message(session.session_key, role="assistant", content="x" * 5000)
    body = viewer_client.get(
        reverse("sessions:detail", args=[session.session_key])
    ).content.decode()
    assert "<details><summary>" in body and "5000 characters" in body


def test_ms_filter_renders_dates():
    from receipts_app.console.templatetags import capped, ms_date

    assert ms_date(0) == "1970-01-01 00:00:00 UTC"
    assert ms_date(None) == "—"
    assert capped(10_001) == "10,000+" and capped(42) == "42"
    assert now_ms() > 0


def test_receipt_detail_explains_a_degraded_flush(viewer_client):
    row = make_receipt(
        session_key="agent:main:webchat:alpha",
        scope="repair",
        status="repair_pending",
        reason="parse_failed_archived",
        target_path="memory/.raw_fallbacks/2026-05-29-flush.md",
        content_hash="c" * 64,
    )
    checkpoint = make_receipt(session_key="agent:main:webchat:alpha", status="checkpoint_saved")

    body = viewer_client.get(reverse("receipts:detail", args=[row.receipt_id])).content.decode()
    plain = viewer_client.get(
        reverse("receipts:detail", args=[checkpoint.receipt_id])
    ).content.decode()

    assert "Flush outcome" in body
    assert "kept only as a raw archive" in body
    assert '<dd data-field="safety_status">degraded_archive</dd>' in body
    assert '<dd data-field="allows_destructive_compaction">yes</dd>' in body
    assert "Flush outcome" not in plain
