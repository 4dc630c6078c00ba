"""The overview's panels opened at their own URLs (a bookmark, a link copied from the network
tab): the console's page around the panel, with its header and styles, not a bare unstyled
fragment; a panel with nothing to show says so instead of a blank page. htmx still gets the
fragment alone."""

from __future__ import annotations

import pytest

from operations_app.time_at_risk import track_time_at_risk
from tests.factories import make_receipt

from .conftest import HX

pytestmark = pytest.mark.django_db

PANELS = {
    "/operations/time-at-risk/": "Time at risk",
    "/operations/gateway-link/": "The gateway&#x27;s own view",
    "/checkpoints/verified/": "Checkpoints on disk",
}


@pytest.mark.parametrize("path", PANELS)
def test_a_panel_opened_at_its_url_is_a_console_page(viewer_client, path):
    make_receipt(session_key="agent:main:webchat:panel", status="checkpoint_failed")
    track_time_at_risk()
    page = viewer_client.get(path).content.decode()
    assert '<header class="topbar">' in page
    assert "console/console.css" in page
    assert f"<title>{PANELS[path]} · OpenSquilla memory" in page


@pytest.mark.parametrize("path", PANELS)
def test_htmx_still_gets_the_panel_alone(viewer_client, path):
    make_receipt(session_key="agent:main:webchat:panel", status="checkpoint_failed")
    track_time_at_risk()
    fragment = viewer_client.get(path, **HX).content.decode()
    assert "<header" not in fragment and "<html" not in fragment


def test_an_empty_panel_says_so(viewer_client):
    # No gateway is linked: the fragment is empty (the overview shows nothing in its place),
    # the page says why there is nothing.
    assert viewer_client.get("/operations/gateway-link/", **HX).content.decode().strip() == ""
    page = viewer_client.get("/operations/gateway-link/").content.decode()
    assert "No gateway is linked" in page
