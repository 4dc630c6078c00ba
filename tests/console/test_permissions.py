"""Roles: anonymous users log in, viewers read without buttons, operators act.

Permissions are checked in the views, so a fragment or a POST sent by hand is refused the
same way as the page.
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from receipts_app.models import MemoryDurableReceipt, ReceiptEvent, RequeuePlan
from tests.factories import make_receipt, make_session

from .conftest import HX

pytestmark = pytest.mark.django_db


@pytest.fixture
def failed():
    session = make_session("agent:main:webchat:p", messages=1)
    return make_receipt(
        status="checkpoint_failed",
        reason="disk full",
        session_key=session.session_key,
        session_id=session.session_id,
    )


def _pages(receipt_id: str, session_key: str) -> list[str]:
    return [
        reverse("receipts:overview"),
        reverse("receipts:list"),
        reverse("receipts:detail", args=[receipt_id]),
        reverse("receipts:plans"),
        reverse("receipts:audit"),
        reverse("sessions:list"),
        reverse("sessions:detail", args=[session_key]),
        reverse("receipts:session_memory") + f"?key={session_key}",
    ]


def _posts(receipt_id: str) -> list[tuple[str, dict]]:
    return [
        (reverse("receipts:requeue", args=[receipt_id]), {}),
        (reverse("receipts:acknowledge", args=[receipt_id]), {"reason": "accept"}),
        (reverse("receipts:plan_create"), {"status": "checkpoint_failed", "all_matching": "1"}),
        (reverse("receipts:session_checkpoint"), {"key": "agent:main:webchat:p"}),
        (reverse("receipts:session_flush"), {"key": "agent:main:webchat:p"}),
    ]


def test_anonymous_is_sent_to_login_for_every_page(client, failed):
    for url in _pages(failed.receipt_id, failed.session_key):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/accounts/login/"), url


def test_anonymous_htmx_request_redirects_the_whole_tab(client, failed):
    response = client.get(reverse("receipts:list"), **HX)
    assert response["HX-Redirect"].startswith("/accounts/login/")


def test_anonymous_posts_change_nothing(client, failed):
    for url, data in _posts(failed.receipt_id):
        assert client.post(url, data).status_code == 302
    failed.refresh_from_db()
    assert failed.status == "checkpoint_failed"
    assert not ReceiptEvent.objects.filter(action__in=["requeue", "acknowledge"]).exists()


def test_login_page_renders_and_logs_in(client, db):
    from tests.factories import make_user

    make_user("lia", "viewer")
    page = client.get(reverse("login"))
    assert page.status_code == 200 and 'name="username"' in page.content.decode()
    response = client.post(reverse("login"), {"username": "lia", "password": "pw-Secret-123"})
    assert response.status_code == 302
    assert client.get(reverse("receipts:overview")).status_code == 200


def test_user_without_a_role_is_refused_politely(norole_client, failed):
    response = norole_client.get(reverse("receipts:list"))
    assert response.status_code == 403
    assert "does not allow" in response.content.decode()


def test_viewer_reads_every_page_and_sees_no_action_buttons(viewer_client, failed):
    for url in _pages(failed.receipt_id, failed.session_key):
        response = viewer_client.get(url)
        assert response.status_code == 200, url
        body = response.content.decode()
        for marker in (
            'data-action="requeue"',
            'data-action="acknowledge"',
            "Requeue this group",
            'data-action="checkpoint-now"',
            "bulk-form",
            "hx-post",
        ):
            assert marker not in body, (url, marker)


def test_viewer_posts_are_refused_with_403_and_change_nothing(viewer_client, failed):
    for url, data in _posts(failed.receipt_id):
        assert viewer_client.post(url, data).status_code == 403, url
        assert viewer_client.post(url, data, **HX).status_code == 403, url
    failed.refresh_from_db()
    assert failed.status == "checkpoint_failed"
    assert not RequeuePlan.objects.exists()
    assert not ReceiptEvent.objects.filter(
        action__in=["requeue", "acknowledge", "checkpoint_now", "flush_now"]
    ).exists()


def test_operator_sees_the_action_buttons(operator_client, failed):
    detail = operator_client.get(
        reverse("receipts:detail", args=[failed.receipt_id])
    ).content.decode()
    assert 'data-action="requeue"' in detail and 'data-action="acknowledge"' in detail
    listing = operator_client.get(reverse("receipts:list")).content.decode()
    assert "bulk-form" in listing and "select-page" in listing


def test_get_on_an_action_url_is_not_allowed(operator_client, failed):
    assert (
        operator_client.get(reverse("receipts:requeue", args=[failed.receipt_id])).status_code
        == 405
    )


def test_csrf_is_enforced_on_console_posts(failed, db):
    from tests.factories import make_user

    make_user("csrfop", "operator")
    client = Client(enforce_csrf_checks=True)
    client.login(username="csrfop", password="pw-Secret-123")
    response = client.post(reverse("receipts:requeue", args=[failed.receipt_id]), **HX)
    assert response.status_code == 403
    assert MemoryDurableReceipt.objects.get(pk=failed.pk).status == "checkpoint_failed"
    # The page carries the token in hx-headers on <body>, which is what htmx sends.
    page = client.get(reverse("receipts:list")).content.decode()
    assert 'hx-headers=\'{"X-CSRFToken": "' in page


def test_a_wrong_method_gets_a_page_that_says_so(operator_client, failed):
    """A bare 405 from Django's method check was a blank page; it now says what to use, keeps
    the Allow header, and an htmx request gets the message in the page's message area."""
    url = reverse("receipts:requeue", args=[failed.receipt_id])
    response = operator_client.get(url)
    assert response.status_code == 405 and response["Allow"] == "POST"
    body = response.content.decode()
    assert "This address does not accept GET: use POST." in body
    assert "Back to the overview" in body  # the console's error page, not a bare body
    htmx = operator_client.put(reverse("receipts:list"), headers={"HX-Request": "true"})
    assert htmx.status_code == 405 and htmx["HX-Retarget"] == "#messages"
    assert "does not accept PUT" in htmx.content.decode()
    # The API keeps its JSON answer.
    api = operator_client.delete(reverse("api:list_receipts"))
    assert api.status_code == 405 and api.json()["code"] == "method_not_allowed"
