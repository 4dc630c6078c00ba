"""The receipt page's flush-outcome panel in Chromium, at desktop and phone widths."""

from __future__ import annotations

import pytest

from tests.factories import make_receipt, make_session, make_user

from .conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("width", [1400, 390])
def test_degraded_flush_is_explained_without_horizontal_scroll(
    page, live_server, screenshot, width
):
    make_user("vera", "viewer")
    session = make_session("agent:main:webchat:degraded")
    receipt = make_receipt(
        session_key=session.session_key,
        session_id=session.session_id,
        scope="repair",
        status="repair_pending",
        reason="parse_failed_archived",
        target_path="memory/.raw_fallbacks/2026-05-29-agent-main-webchat-degraded-flush-"
        "0123456789abcdef0123456789abcdef.md",
        content_hash="e" * 64,
    )
    page.set_viewport_size({"width": width, "height": 900})
    log_in(page, live_server.url, "vera")

    page.goto(f"{live_server.url}/receipts/{receipt.receipt_id}/")

    panel = page.locator("section.flush-outcome")
    assert panel.is_visible()
    assert "kept only as a raw archive" in panel.inner_text()
    assert panel.locator('[data-field="safety_status"]').inner_text() == "degraded_archive"
    # Nothing in the panel reaches past the viewport (the long archive path wraps). The page
    # header's own overflow at 390 px is the console's layout work, not this panel's.
    sticking_out = page.evaluate(
        """[...document.querySelectorAll('section.flush-outcome, section.flush-outcome *')]
             .filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth)
             .map(e => e.tagName)"""
    )
    assert sticking_out == []
    screenshot(page, f"flush-outcome-{width}")
