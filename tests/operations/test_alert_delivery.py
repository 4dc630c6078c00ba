"""Alert deliveries to real receivers: signed webhook, Slack-compatible, e-mail over SMTP,
and receivers that are down, slow, or answer 500. Every attempt is recorded; secrets never leak."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging

import pytest

from operations_app.alerts import delivery as delivery_mod
from operations_app.alerts.channels import SIGNATURE_HEADER, TIMESTAMP_HEADER
from operations_app.alerts.service import save_rule, send_test
from operations_app.models import AlertDelivery, AlertRule
from tests.operations.receivers import closed_port_url, http_receiver, smtp_receiver

pytestmark = pytest.mark.django_db
SECRET = "whsec-0123456789abcdef"


def _rule(channel: str, target: str, **extra) -> AlertRule:
    values = {
        "name": f"{channel} alert",
        "condition": AlertRule.FAILURE_STATUS,
        "threshold": 1,
        "channel": channel,
        "target": target,
    }
    values.update(extra)
    return save_rule(values=values, actor="ada", secret=SECRET if channel == "webhook" else "")


def _delivery(rule: AlertRule) -> AlertDelivery:
    return AlertDelivery.objects.create(
        rule=rule,
        kind="firing",
        payload={"alert": rule.name, "kind": "firing", "summary": "2 receipts failed"},
    )


def test_webhook_is_signed_with_hmac_sha256_over_timestamp_and_body(allow_local_targets):
    with http_receiver() as receiver:
        rule = _rule("webhook", receiver.url)
        outcome = delivery_mod.attempt_delivery(_delivery(rule).pk)
    assert outcome.state == "sent"
    (request,) = receiver.requests
    timestamp = request.headers[TIMESTAMP_HEADER]
    expected = hmac.new(SECRET.encode(), timestamp.encode() + b"." + request.body, hashlib.sha256)
    assert request.headers[SIGNATURE_HEADER] == f"sha256={expected.hexdigest()}"
    assert json.loads(request.body)["summary"] == "2 receipts failed"
    attempt = AlertDelivery.objects.get().tries.get()
    assert attempt.ok and attempt.status_code == 200 and attempt.number == 1


def test_slack_compatible_webhook_gets_a_text_message(allow_local_targets):
    with http_receiver() as receiver:
        rule = _rule("slack", receiver.url)
        delivery_mod.attempt_delivery(_delivery(rule).pk)
    body = json.loads(receiver.requests[0].body)
    assert body == {"text": "[FIRING] slack alert: 2 receipts failed"}


def test_email_goes_through_djangos_backend_to_a_real_smtp_server(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    with smtp_receiver() as smtp:
        settings.EMAIL_HOST, settings.EMAIL_PORT = smtp.host, smtp.port
        rule = _rule("email", "ops@example.com, oncall@example.com")
        outcome = delivery_mod.attempt_delivery(_delivery(rule).pk)
    assert outcome.state == "sent"
    (message,) = smtp.messages
    assert "[FIRING] email alert" in message["Subject"]
    assert "ops@example.com" in message["To"] and "oncall@example.com" in message["To"]


def test_email_to_a_mail_server_that_is_down_is_recorded_and_retried(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = (
        "127.0.0.1",
        int(closed_port_url().split(":")[2].split("/")[0]),
    )
    rule = _rule("email", "ops@example.com")
    outcome = delivery_mod.attempt_delivery(_delivery(rule).pk)
    assert outcome.state == "pending" and "mail server" in outcome.error


def test_a_receiver_answering_500_is_retried_with_backoff_then_fails(allow_local_targets, caplog):
    caplog.set_level(logging.DEBUG)
    with http_receiver(status=500) as receiver:
        rule = _rule("webhook", receiver.url)
        delivery = _delivery(rule)
        waits = []
        for _ in range(delivery_mod.MAX_ATTEMPTS):
            outcome = delivery_mod.attempt_delivery(delivery.pk)
            waits.append(outcome.retry_in_s)
    assert waits == [*delivery_mod.BACKOFF_S, None]
    delivery.refresh_from_db()
    assert delivery.state == "failed" and delivery.attempts == delivery_mod.MAX_ATTEMPTS
    assert delivery.last_error == "the receiver answered HTTP 500"
    tries = list(delivery.tries.order_by("number"))
    assert [t.number for t in tries] == list(range(1, delivery_mod.MAX_ATTEMPTS + 1))
    assert all(t.status_code == 500 and not t.ok for t in tries)
    assert len(receiver.requests) == delivery_mod.MAX_ATTEMPTS
    # Nothing secret in the logs: not the HMAC key, not the token in the URL's path.
    for record in caplog.records:
        assert SECRET not in record.getMessage(), record.name
        assert "T0KEN" not in record.getMessage(), record.name
    # A failed delivery is not attempted again.
    assert delivery_mod.attempt_delivery(delivery.pk).state == "skipped"


def test_a_slow_receiver_times_out_and_is_retried(allow_local_targets, settings):
    settings.OPENSQUILLA_ALERT_TIMEOUT = 0.3
    with http_receiver(delay_s=2) as receiver:
        rule = _rule("webhook", receiver.url)
        outcome = delivery_mod.attempt_delivery(_delivery(rule).pk)
    assert outcome.state == "pending"
    assert outcome.error == "the receiver did not answer within 0.3 s"


def test_a_receiver_that_went_down_after_the_rule_was_saved(allow_local_targets):
    with http_receiver() as receiver:
        rule = _rule("webhook", receiver.url)
    # The server is gone now.
    outcome = delivery_mod.attempt_delivery(_delivery(rule).pk)
    assert outcome.state == "pending"
    assert outcome.error.startswith("could not connect to the receiver")
    assert "127.0.0.1" not in outcome.error


def test_a_private_target_is_refused_at_delivery_time_when_the_policy_changed(
    allow_local_targets, settings
):
    with http_receiver() as receiver:
        rule = _rule("webhook", receiver.url)
        settings.OPENSQUILLA_ALERT_ALLOW_PRIVATE_TARGETS = False
        outcome = delivery_mod.attempt_delivery(_delivery(rule).pk)
        assert receiver.requests == []
    assert outcome.state == "failed" and "private" in outcome.error


def test_the_task_reschedules_a_failed_attempt_with_its_backoff(
    allow_local_targets, run_deliveries_inline, django_capture_on_commit_callbacks
):
    with http_receiver(status=500) as receiver:
        rule = _rule("webhook", receiver.url)
        with django_capture_on_commit_callbacks(execute=True):
            delivery = send_test(rule, actor="ada")
    assert run_deliveries_inline == [(delivery.pk, None), (delivery.pk, delivery_mod.BACKOFF_S[0])]
    delivery.refresh_from_db()
    assert delivery.state == "pending" and delivery.attempts == 1


def test_the_sweep_resends_a_delivery_whose_message_was_lost(
    allow_local_targets, run_deliveries_inline, django_capture_on_commit_callbacks
):
    with http_receiver() as receiver:
        rule = _rule("webhook", receiver.url)
        lost = _delivery(rule)
        AlertDelivery.objects.filter(pk=lost.pk).update(next_attempt_at=1)
        with django_capture_on_commit_callbacks(execute=True):
            assert delivery_mod.sweep_deliveries() == 1
        assert len(receiver.requests) == 1
    lost.refresh_from_db()
    assert lost.state == "sent"
