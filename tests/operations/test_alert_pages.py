"""The alert pages as an admin uses them: create, edit, send a test, read deliveries; every
bad input a clear form error; secrets never on a page."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from operations_app.alerts.service import save_rule
from operations_app.models import AlertDelivery, AlertDeliveryAttempt, AlertRule
from tests.factories import make_user
from tests.operations.receivers import closed_port_url, http_receiver

pytestmark = pytest.mark.django_db
SECRET = "whsec-page-secret-0123456789"


@pytest.fixture
def admin(db) -> Client:
    make_user("ada", "admin")
    client = Client()
    client.login(username="ada", password="pw-Secret-123")
    return client


def _form(url: str, **changes) -> dict:
    data = {
        "name": "Failures on main",
        "condition": "failure_status",
        "agent": "main",
        "scope": "",
        "threshold": "1",
        "channel": "webhook",
        "target": url,
        "secret": SECRET,
        "cooldown_seconds": "3600",
        "enabled": "on",
    }
    data.update(changes)
    return data


def test_admin_creates_a_webhook_rule_and_the_list_masks_its_secrets(admin, allow_local_targets):
    with http_receiver() as receiver:
        response = admin.post("/operations/alerts/new/", _form(receiver.url))
    assert response.status_code == 302, response.content.decode()
    rule = AlertRule.objects.get()
    assert rule.secret == SECRET and rule.created_by == "ada"
    html = admin.get("/operations/alerts/").content.decode()
    assert "Failures on main" in html
    assert SECRET not in html and "T0KEN" not in html
    assert "http://127.0.0.1:" in html  # scheme and host only


def test_the_edit_form_never_shows_the_secret_or_the_url_and_blank_keeps_them(
    admin, allow_local_targets
):
    with http_receiver() as receiver:
        admin.post("/operations/alerts/new/", _form(receiver.url))
        rule = AlertRule.objects.get()
        html = admin.get(f"/operations/alerts/{rule.pk}/").content.decode()
        assert SECRET not in html and "T0KEN" not in html
        assert "leave blank to keep" in html
        response = admin.post(
            f"/operations/alerts/{rule.pk}/", _form("", secret="", name="Renamed", threshold="3")
        )
    assert response.status_code == 302, response.content.decode()
    rule.refresh_from_db()
    assert (rule.name, rule.threshold, rule.secret, rule.target) == (
        "Renamed",
        3,
        SECRET,
        receiver.url,
    )


@pytest.mark.parametrize(
    "changes,field_message",
    [
        ({"target": "__closed__"}, "unreachable"),
        ({"target": "ftp://example.org/hook"}, "Enter an http:// or https:// URL."),
        ({"target": "__local__", "private": False}, "private or local address"),
        (
            {"channel": "email", "target": "ops@@example"},
            "Not a valid e-mail address: ops@@example.",
        ),
        ({"threshold": "0"}, "The threshold must be greater than zero."),
        ({"threshold": "-5"}, "The threshold must be greater than zero."),
        ({"threshold": "1.5"}, "enter a whole number"),
        ({"secret": ""}, "enter a secret the receiver also knows"),
        ({"secret": "short"}, "at least 16 characters"),
        ({"target": "http://no-such-host.invalid/hook"}, "does not resolve"),
    ],
)
def test_bad_input_is_a_clear_form_error_and_saves_nothing(admin, settings, changes, field_message):
    settings.OPENSQUILLA_ALERT_ALLOW_PRIVATE_TARGETS = changes.pop("private", True)
    with http_receiver() as receiver:
        if changes.get("target") == "__closed__":
            changes["target"] = closed_port_url()
        elif changes.get("target") == "__local__":
            changes["target"] = receiver.url
        response = admin.post("/operations/alerts/new/", _form(receiver.url, **changes))
    assert response.status_code == 400
    html = response.content.decode()
    assert field_message in html
    assert "The alert rule needs fixing" in html
    assert not AlertRule.objects.exists()


def test_send_test_delivers_and_the_deliveries_page_lists_each_attempt(
    admin, allow_local_targets, run_deliveries_inline, django_capture_on_commit_callbacks
):
    with http_receiver(status=500) as receiver:
        admin.post("/operations/alerts/new/", _form(receiver.url))
        rule = AlertRule.objects.get()
        with django_capture_on_commit_callbacks(execute=True):
            response = admin.post(f"/operations/alerts/{rule.pk}/test/")
        assert response.status_code == 302
        assert len(receiver.requests) == 1
    page = admin.get(response["Location"]).content.decode()
    assert "test notice sent by ada" in page
    assert "attempt 1" in page and "the receiver answered HTTP 500" in page
    assert SECRET not in page


def test_viewers_and_operators_cannot_reach_alerts(db):
    for role in ("viewer", "operator"):
        make_user(f"u-{role}", role)
        client = Client()
        client.login(username=f"u-{role}", password="pw-Secret-123")
        assert client.get("/operations/alerts/").status_code == 403


def test_admin_site_masks_the_secret(admin, allow_local_targets):
    with http_receiver() as receiver:
        rule = save_rule(
            values={
                "name": "r",
                "condition": "failure_status",
                "threshold": 1,
                "channel": "webhook",
                "target": receiver.url,
            },
            actor="ada",
            secret=SECRET,
        )
    superuser_html = admin.get(f"/admin/operations_app/alertrule/{rule.pk}/change/")
    assert superuser_html.status_code == 200
    assert SECRET not in superuser_html.content.decode()
    listing = admin.get("/admin/operations_app/alertrule/").content.decode()
    assert "T0KEN" not in listing


def _seed_deliveries(rule: AlertRule, n: int) -> None:
    for i in range(n):
        delivery = AlertDelivery.objects.create(
            rule=rule, kind="firing", payload={"summary": f"s{i}"}, attempts=2, state="failed"
        )
        for number in (1, 2):
            AlertDeliveryAttempt.objects.create(
                delivery=delivery, number=number, error="the receiver answered HTTP 500"
            )


@pytest.mark.parametrize("page", ["list", "deliveries", "edit"])
def test_alert_pages_have_a_fixed_query_count(admin, allow_local_targets, page):
    with http_receiver() as receiver:
        rules = [
            save_rule(
                values={
                    "name": f"r{i}",
                    "condition": "failure_status",
                    "threshold": 1,
                    "channel": "slack",
                    "target": receiver.url,
                },
                actor="ada",
            )
            for i in range(2)
        ]
    url = {
        "list": "/operations/alerts/",
        "deliveries": f"/operations/alerts/{rules[0].pk}/deliveries/",
        "edit": f"/operations/alerts/{rules[0].pk}/",
    }[page]
    _seed_deliveries(rules[0], 2)
    with CaptureQueriesContext(connection) as small:
        assert admin.get(url).status_code == 200
    _seed_deliveries(rules[0], 15)
    _seed_deliveries(rules[1], 15)
    with CaptureQueriesContext(connection) as large:
        assert admin.get(url).status_code == 200
    assert len(large.captured_queries) == len(small.captured_queries)
    assert len(small.captured_queries) <= 8
