"""The session page's "Checkpoint now" and "Flush now" say when the session's gateway has no
live worker on its queue (the sentence a requeue carries); the work is queued all the same."""

from __future__ import annotations

import pytest
from django.urls import reverse

from operations_app import heartbeats
from receipts_app.models import OutboxMessage
from sessions_app.gateways import ensure_gateway, using_gateway
from tests.factories import make_session

pytestmark = pytest.mark.django_db

KEY = "agent:main:webchat:default"
B_WAITS = "gateway b has no live worker on queue gateway.b: the work will wait until one starts"


@pytest.fixture
def b_session():
    ensure_gateway("b")
    with using_gateway("b"):
        return make_session(KEY, messages=2)


@pytest.mark.parametrize("kind", ["checkpoint", "flush"])
def test_the_panel_says_b_has_no_worker_after_a_trigger(operator_client, b_session, kind):
    url = reverse(f"receipts:session_{kind}") + "?gateway=b"
    # The HTMX swap of the panel.
    panel = operator_client.post(url, {"key": KEY}, HTTP_HX_REQUEST="true")
    assert panel.status_code == 200
    html = panel.content.decode()
    assert f"{kind} queued" in html and B_WAITS in html
    assert OutboxMessage.objects.filter(queue="gateway.b").count() == 1
    # Without JavaScript: the redirect to the session page carries the same message.
    page = operator_client.post(url, {"key": KEY}, follow=True)
    assert page.status_code == 200
    html = page.content.decode()
    assert f"{kind} queued" in html and B_WAITS in html

    heartbeats.mark_started("worker", "celery@host-b", {"queues": ["gateway.b"]})
    html = operator_client.post(url, {"key": KEY}, HTTP_HX_REQUEST="true").content.decode()
    assert f"{kind} queued" in html and B_WAITS not in html


def test_a_local_session_trigger_carries_no_warning(operator_client):
    make_session(KEY, messages=2)
    html = operator_client.post(
        reverse("receipts:session_checkpoint"), {"key": KEY}, HTTP_HX_REQUEST="true"
    ).content.decode()
    assert "checkpoint queued" in html and "no live worker" not in html
