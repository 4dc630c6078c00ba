"""The restore page in Chromium: every golden checkpoint read back exactly, escaped, at desktop
and phone widths."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.conf import settings

from sessions_app import services as session_services
from tests.factories import make_session, make_user
from tests.receipts_app.test_restore import golden_bodies, saved_receipt_for

from .conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Every event's text as the page shows it, in order (message, then its tool calls).
SHOWN_EVENTS = """[...document.querySelectorAll('#conversation li.msg pre.msg-body')]
    .map(e => e.textContent)"""
STICKING_OUT = """[...document.querySelectorAll('main *')]
    .filter(e => !e.closest('.table-scroll'))
    .filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
    .map(e => e.tagName + '.' + e.className)"""


@pytest.fixture
def browser_workspace(tmp_path, settings):
    root = tmp_path / "workspace"
    root.mkdir()
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(root)
    return root


@pytest.mark.parametrize("width", [1400, 390])
def test_every_golden_checkpoint_reads_back_exactly(
    page, live_server, browser_workspace, golden_dir, screenshot, width
):
    make_user("vera", "viewer")
    page.set_viewport_size({"width": width, "height": 900})
    log_in(page, live_server.url, "vera")
    bodies = golden_bodies(golden_dir)
    for name, body in bodies:
        receipt = saved_receipt_for(browser_workspace, body, name=name)
        page.goto(f"{live_server.url}/receipts/{receipt.receipt_id}/checkpoint/?limit=500")
        events = [json.loads(line) for line in body.decode("utf-8").splitlines()]
        assert page.evaluate(SHOWN_EVENTS) == [e["content"] for e in events], name
        assert page.evaluate(STICKING_OUT) == [], name
    screenshot(page, f"checkpoint-restore-golden-{width}")


@pytest.mark.parametrize("width", [1400, 390])
def test_script_in_content_is_text(page, live_server, browser_workspace, screenshot, width):
    from receipts_app.checkpoint import record_memory_checkpoint

    assert settings.OPENSQUILLA_CHECKPOINT_WORKSPACE
    make_user("vera", "viewer")
    session = make_session("agent:main:webchat:restore-xss")
    hostile = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'
    session_services.append_message(session.session_key, role="user", content=hostile)
    session_services.append_message(
        session.session_key,
        role="assistant",
        content="answer",
        tool_calls=[{"id": "c1", "function": {"name": "grep", "arguments": hostile}}],
    )
    # Playwright's loop runs in this thread; the checkpoint's async_to_sync needs another.
    with ThreadPoolExecutor(1) as pool:
        saved = pool.submit(record_memory_checkpoint, session.session_key).result()
    page.set_viewport_size({"width": width, "height": 900})
    log_in(page, live_server.url, "vera")
    page.goto(f"{live_server.url}/receipts/{saved.receipt_id}/checkpoint/")
    assert page.evaluate("window.pwned === undefined")
    assert page.evaluate(SHOWN_EVENTS) == [hostile, "answer", hostile]
    assert page.locator('[data-count="same"]').inner_text() == "2"
    assert page.evaluate(STICKING_OUT) == []
    screenshot(page, f"checkpoint-restore-{width}")


@pytest.mark.parametrize("width", [1400, 390])
def test_the_loss_is_named_on_the_receipt_page(
    page, live_server, browser_workspace, screenshot, width
):
    from receipts_app.checkpoint import record_memory_checkpoint
    from sessions_app.models import TranscriptEntry

    make_user("otto", "operator")
    session = make_session("agent:main:webchat:restore-loss", messages=5)
    with ThreadPoolExecutor(1) as pool:
        saved = pool.submit(record_memory_checkpoint, session.session_key).result()
    oldest = TranscriptEntry.objects.filter(session_id=session.session_id).order_by("id")[:2]
    TranscriptEntry.objects.filter(pk__in=[e.pk for e in oldest]).delete()
    (browser_workspace / saved.source_path).unlink()
    page.set_viewport_size({"width": width, "height": 900})
    log_in(page, live_server.url, "otto")
    page.goto(f"{live_server.url}/receipts/{saved.receipt_id}/")
    panel = page.locator("#checkpoint-loss")
    assert "2 of 5 entries this checkpoint covered are in no transcript" in panel.inner_text()
    assert panel.locator("table.lost-entries tbody tr").count() == 2
    assert page.evaluate(STICKING_OUT) == []
    screenshot(page, f"checkpoint-loss-{width}")
