"""An empty ledger's overview: every panel says there is nothing, none is a blank box."""

from __future__ import annotations

import re

import pytest

from receipts_app.failure_groups import fold_all
from tests.factories import make_receipt

pytestmark = pytest.mark.django_db


def _section(page: str, labelled_by: str) -> str:
    start = page.index(f'aria-labelledby="{labelled_by}"')
    return page[start : page.index("</section>", start)]


def test_an_empty_ledger_says_so_in_every_panel(viewer_client):
    page = viewer_client.get("/").content.decode()
    assert "No receipts." in _section(page, "by-status")
    assert "No receipts." in _section(page, "by-scope")
    assert "No receipts created in this range." in _section(page, "chart-title")
    # Not "All 0 receipts at risk".
    assert "No receipt is at risk in the ledger" in _section(page, "groups-title")
    assert "All 0" not in page


def test_a_ledger_with_receipts_shows_them_not_the_empty_notes(viewer_client):
    make_receipt(session_key="agent:main:webchat:empty", status="checkpoint_failed")
    page = viewer_client.get("/").content.decode()
    assert "No receipts." not in page
    assert not re.search(r"No receipts created in this range", page)
    # Until beat's fold groups it, the panel says a change waits, not that nothing is at risk.
    assert "No receipt is at risk" not in page
    assert "1 change arrived in the last seconds" in _section(page, "groups-title")
    fold_all()
    page = viewer_client.get("/").content.decode()
    assert "The one receipt at risk in the ledger" in _section(page, "groups-title")
