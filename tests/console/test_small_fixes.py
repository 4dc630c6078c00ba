"""The smaller things a new operator tripped over (issue 10, item 8)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from receipts_app.models import MemoryDurableReceipt
from tests.factories import make_receipt, make_session

from .conftest import HX, hx
from .html_forms import forms_posting_to

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("client_fixture", "role"),
    [("viewer_client", "viewer"), ("operator_client", "operator"), ("admin_client_role", "admin")],
)
def test_header_badge_says_the_real_role(request, client_fixture, role):
    client = request.getfixturevalue(client_fixture)
    body = client.get(reverse("receipts:overview")).content.decode()
    assert f'<span class="role" data-role="{role}">{role}</span>' in body


def test_favicon_is_a_static_file():
    response = Client().get("/favicon.ico")
    assert response.status_code == 200
    assert response["Content-Type"] in ("image/x-icon", "image/vnd.microsoft.icon")
    assert b"".join(response.streaming_content)[:4] == b"\x00\x00\x01\x00"  # an ICO header


def test_stale_message_says_stale_once(operator_client):
    row = make_receipt(scope="repair", status="repair_abandoned", attempt_count=4)
    url = reverse("receipts:requeue", args=[row.receipt_id])
    response = operator_client.post(
        url, {"expected_status": "repair_failed"}, **hx("receipt-detail")
    )
    body = response.content.decode()
    assert "stale: status is now repair_abandoned, not repair_failed" in body
    assert "stale: stale" not in body


def test_acknowledge_message_says_acknowledged_once(operator_client):
    row = make_receipt(scope="repair", status="repair_abandoned", attempt_count=4)
    response = operator_client.post(
        reverse("receipts:acknowledge", args=[row.receipt_id]),
        {"reason": "archive lost"},
        **hx("receipt-detail"),
    )
    body = response.content.decode()
    assert "acknowledged (repair_abandoned)" in body
    assert "acknowledged: acknowledged" not in body


def test_an_acknowledged_receipt_explains_itself(operator_client):
    row = make_receipt(scope="repair", status="acknowledged")
    body = operator_client.get(reverse("receipts:detail", args=[row.receipt_id])).content.decode()
    assert "Not available: already acknowledged" in body
    assert "only terminal failures can be acknowledged" not in body


def test_fenced_rows_get_no_requeue_button(operator_client):
    """The rows the requeue rules would refuse (session reset since) get no button."""
    session = make_session("agent:main:webchat:fence", messages=2)
    live = make_receipt(
        session_key=session.session_key, session_id=session.session_id, status="checkpoint_failed"
    )
    fenced = make_receipt(
        session_key=session.session_key,
        session_id="an-earlier-generation",
        status="checkpoint_failed",
    )
    page = operator_client.get(reverse("receipts:list") + "?status=checkpoint_failed").content
    html = page.decode()
    assert forms_posting_to(html, reverse("receipts:requeue", args=[live.receipt_id]))
    assert not forms_posting_to(html, reverse("receipts:requeue", args=[fenced.receipt_id]))
    # The row returned after an action follows the same rule.
    response = operator_client.post(
        reverse("receipts:requeue", args=[fenced.receipt_id]), {"fragment": "receipt-row"}, **HX
    )
    body = response.content.decode()
    assert "fenced: session was reset" in body and 'data-action="row-requeue"' not in body
    assert MemoryDurableReceipt.objects.get(pk=fenced.pk).status == "checkpoint_failed"
