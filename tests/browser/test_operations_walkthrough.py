"""Operations in a real browser: the liveness page, and an admin creating an alert, sending a
test to a real local receiver and reading its delivery (screenshots at 1400 px and 390 px)."""

from __future__ import annotations

import pytest

from operations_app import heartbeats, tasks
from operations_app.alerts.delivery import attempt_delivery
from operations_app.models import AlertDelivery, AlertRule
from tests.factories import make_receipt, make_user
from tests.operations.receivers import http_receiver

from .conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_viewer_reads_liveness_and_time_at_risk(page, live_server, screenshot):
    make_user("vera", "viewer")
    heartbeats.mark_started("worker", "celery@web-1")
    heartbeats.mark_started("beat", "beat@web-1")
    make_receipt(session_key="agent:main:webchat:risk", status="checkpoint_failed")
    from operations_app.time_at_risk import track_time_at_risk

    track_time_at_risk()
    log_in(page, live_server.url, "vera")
    page.wait_for_selector("#risk-title")  # the panel loads after the overview renders
    page.click("text=Operations")
    page.wait_for_url(f"{live_server.url}/operations/liveness/")
    assert page.locator("strong", has_text="1 alive").is_visible()
    assert page.locator("strong", has_text="ticking").is_visible()
    # A viewer reads the worker by its kind and state, not its node name (it names the host).
    workers = page.locator("section[aria-labelledby=workers-title]")
    assert workers.locator("td", has_text="worker").first.is_visible()
    assert "celery@web-1" not in page.content()
    screenshot(page, "operations-liveness-1400")
    page.set_viewport_size({"width": 390, "height": 900})
    page.reload()
    assert page.locator("strong", has_text="1 alive").is_visible()
    screenshot(page, "operations-liveness-390")


def test_admin_creates_an_alert_and_sends_a_test(
    page, live_server, screenshot, settings, monkeypatch
):
    settings.OPENSQUILLA_ALERT_ALLOW_PRIVATE_TARGETS = True
    # The worker's part is played here: the queued delivery is attempted by the test itself.
    queued: list[int] = []
    monkeypatch.setattr(
        tasks.deliver_alert, "apply_async", lambda args, **kw: queued.append(args[0])
    )
    make_user("ada", "admin")
    with http_receiver() as receiver:
        log_in(page, live_server.url, "ada")
        page.goto(f"{live_server.url}/operations/alerts/new/")
        page.fill('input[name="name"]', "Failures on main")
        page.select_option('select[name="condition"]', "failure_status")
        page.fill('input[name="agent"]', "main")
        page.fill('input[name="threshold"]', "0")
        page.select_option('select[name="channel"]', "webhook")
        page.fill('input[name="target"]', receiver.url)
        page.fill('input[name="secret"]', "whsec-browser-0123456789")
        page.get_by_role("button", name="Save").click()
        # Threshold zero: a clear form error, nothing saved, the secret not echoed back.
        assert page.locator("text=The threshold must be greater than zero.").is_visible()
        assert "whsec-browser" not in page.content()
        screenshot(page, "operations-alert-form-error")
        page.fill('input[name="threshold"]', "1")
        page.fill('input[name="secret"]', "whsec-browser-0123456789")
        page.get_by_role("button", name="Save").click()
        page.wait_for_url(f"{live_server.url}/operations/alerts/")
        assert AlertRule.objects.filter(name="Failures on main").exists()
        page.click("text=Send test")
        page.wait_for_url(f"{live_server.url}/operations/alerts/*/deliveries/")
        assert page.locator("text=Test notice for").is_visible()
        assert AlertDelivery.objects.filter(kind="test").exists()
        for delivery_id in queued:
            attempt_delivery(delivery_id)
        page.reload()
        assert page.locator("text=attempt 1").is_visible()
        assert len(receiver.requests) == 1
        assert "whsec-browser" not in page.content() and "T0KEN" not in page.content()
        screenshot(page, "operations-alert-deliveries-1400")
        page.set_viewport_size({"width": 390, "height": 900})
        page.goto(f"{live_server.url}/operations/alerts/")
        screenshot(page, "operations-alerts-390")
