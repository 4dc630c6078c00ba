"""The checkpoint scrub in the console: the Verify buttons queue it to the worker holding the
files, the overview's panel and the receipts list say what was verified, at a fixed query cost."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from receipts_app.checkpoint import record_memory_checkpoint
from receipts_app.models import OutboxMessage
from receipts_app.scrub import scrub_checkpoints
from sessions_app.gateways import ensure_gateway, using_gateway
from tests.factories import make_session
from tests.scrub_support import scrubbed_b

pytestmark = pytest.mark.django_db


def test_the_console_button_queues_the_scrub_and_says_so(operator_client):
    ensure_gateway("b")
    response = operator_client.post(
        reverse("receipts:scrub"), {"gateway": "b", "agent": "main"}, follow=True
    )
    assert response.status_code == 200
    text = response.content.decode()
    assert "Checkpoint scrub of agent main on gateway b queued" in text
    assert OutboxMessage.objects.filter(task="scrub_checkpoints", queue="gateway.b").exists()
    missing = operator_client.post(reverse("receipts:scrub"), {"gateway": "nope"}, follow=True)
    assert "Gateway not found: nope" in missing.content.decode()


def test_a_viewer_has_no_verify_button(viewer_client):
    assert viewer_client.post(reverse("receipts:scrub"), {"gateway": "local"}).status_code == 403


def test_the_panel_and_list_show_what_was_verified(operator_client, settings, workspace):
    gone, whole = scrubbed_b(settings, workspace)
    panel = operator_client.get(reverse("receipts:checkpoints_verified")).content.decode()
    assert "1 of 2 verified within 24 h" in panel and "1 missing" in panel
    assert "verified=ok" in panel and "status=checkpoint_missing" in panel
    listing = operator_client.get(reverse("receipts:list") + "?verified=unsafe").content.decode()
    assert gone.receipt_id in listing and whole.receipt_id not in listing
    assert "missing</span>" in listing


def test_the_panel_and_the_verified_list_cost_the_same_queries_at_any_size(
    operator_client, settings, workspace
):
    def count(url: str) -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert operator_client.get(url).status_code == 200
        return len(ctx.captured_queries)

    urls = (reverse("receipts:checkpoints_verified"), reverse("receipts:list") + "?verified=ok")
    scrubbed_b(settings, workspace, n=2)
    small = [count(u) for u in urls]
    settings.OPENSQUILLA_GATEWAY = "b"
    with using_gateway("b"):
        for index in range(10, 30):
            record_memory_checkpoint(make_session(f"agent:main:x:{index}", messages=2).session_key)
    scrub_checkpoints("b", force=True)
    settings.OPENSQUILLA_GATEWAY = "local"
    assert [count(u) for u in urls] == small


def test_the_agent_page_offers_its_scrub_to_operators_only(operator_client, viewer_client):
    ensure_gateway("b")
    url = reverse("agents:detail", args=["main"]) + "?gateway=b"
    page = operator_client.get(url).content.decode()
    assert 'data-action="scrub-agent"' in page and 'name="gateway" value="b"' in page
    assert 'data-action="scrub-agent"' not in viewer_client.get(url).content.decode()
