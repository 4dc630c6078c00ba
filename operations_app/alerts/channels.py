"""The three ways an alert leaves the site. Each raises ``DeliveryError`` with a message that
names what went wrong and never the target URL, its token or the signing secret.

JSON webhook: ``POST`` of the payload, with ``X-Opensquilla-Timestamp`` (Unix seconds) and
``X-Opensquilla-Signature: sha256=<hex>``, the HMAC-SHA256 under the rule's secret of
``"<timestamp>." + body``; a receiver recomputes it and rejects stale timestamps (replays).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

import httpx
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import send_mail

from ..models import AlertRule
from .validation import check_destination, email_recipients

TIMESTAMP_HEADER = "X-Opensquilla-Timestamp"
SIGNATURE_HEADER = "X-Opensquilla-Signature"


class DeliveryError(Exception):
    def __init__(self, message: str, *, status_code: int | None = None, permanent: bool = False):
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.permanent = permanent


def timeout_s() -> float:
    return float(getattr(settings, "OPENSQUILLA_ALERT_TIMEOUT", 5.0))


def sign(secret: str, timestamp: str, body: bytes) -> str:
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return f"sha256={digest.hexdigest()}"


def _post(url: str, body: bytes, headers: dict[str, str]) -> int:
    try:
        check_destination(url)
    except ValidationError as exc:
        raise DeliveryError(
            f"destination refused: {' '.join(exc.messages)}", permanent=True
        ) from None
    try:
        response = httpx.post(
            url,
            content=body,
            headers={"Content-Type": "application/json", **headers},
            timeout=timeout_s(),
            follow_redirects=False,
        )
    except httpx.TimeoutException:
        raise DeliveryError(f"the receiver did not answer within {timeout_s():g} s") from None
    except httpx.HTTPError as exc:
        raise DeliveryError(f"could not connect to the receiver ({type(exc).__name__})") from None
    if not 200 <= response.status_code < 300:
        raise DeliveryError(
            f"the receiver answered HTTP {response.status_code}", status_code=response.status_code
        )
    return response.status_code


def _text(payload: dict[str, Any]) -> str:
    kind = payload.get("kind", "")
    head = {"firing": "FIRING", "resolved": "RESOLVED", "test": "TEST"}.get(kind, kind.upper())
    return f"[{head}] {payload.get('alert', '')}: {payload.get('summary', '')}"


def send_webhook(rule: AlertRule, payload: dict[str, Any]) -> int:
    body = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    timestamp = str(int(time.time()))
    headers = {TIMESTAMP_HEADER: timestamp, SIGNATURE_HEADER: sign(rule.secret, timestamp, body)}
    return _post(rule.target, body, headers)


def send_slack(rule: AlertRule, payload: dict[str, Any]) -> int:
    return _post(rule.target, json.dumps({"text": _text(payload)}).encode(), {})


def send_email(rule: AlertRule, payload: dict[str, Any]) -> int | None:
    lines = [_text(payload), ""]
    lines += [f"{key}: {value}" for key, value in sorted(payload.items()) if key != "summary"]
    try:
        send_mail(
            subject=f"OpenSquilla alert: {_text(payload)}"[:200],
            message="\n".join(lines),
            from_email=settings.DEFAULT_FROM_EMAIL,
            recipient_list=email_recipients(rule.target),
            fail_silently=False,
        )
    except TimeoutError:
        raise DeliveryError("the mail server did not answer in time") from None
    except Exception as exc:  # noqa: BLE001 - smtplib and socket errors, all reported alike
        raise DeliveryError(f"the mail server refused or failed ({type(exc).__name__})") from None
    return None


SENDERS = {
    AlertRule.WEBHOOK: send_webhook,
    AlertRule.SLACK: send_slack,
    AlertRule.EMAIL: send_email,
}


def send(rule: AlertRule, payload: dict[str, Any]) -> int | None:
    sender = SENDERS.get(rule.channel)
    if sender is None:
        raise DeliveryError(f"unknown channel {rule.channel!r}", permanent=True)
    return sender(rule, payload)
