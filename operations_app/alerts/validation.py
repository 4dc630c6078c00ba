"""What an alert rule may say. The console form and the admin form both call ``validate_rule``.

Webhook targets must be http(s) URLs whose host resolves and accepts a connection; when
``OPENSQUILLA_ALERT_ALLOW_PRIVATE_TARGETS`` is off, a host resolving to a private, loopback,
link-local or reserved address is refused (and checked again at every delivery, since DNS
can change between the two).
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_email

from opensquilla_site.netpolicy import is_private_address as _is_private
from opensquilla_site.netpolicy import resolve_host as _resolve
from sessions_app.gateways import Gateway

from ..models import AlertRule

CONNECT_CHECK_TIMEOUT_S = 3.0
# Conditions whose threshold counts receipts (whole numbers); the rest are seconds.
COUNT_CONDITIONS = (
    AlertRule.FAILURE_STATUS,
    AlertRule.BACKLOG_COUNT,
    AlertRule.GATEWAY_MEMORY_GAP,
    AlertRule.CHECKPOINT_UNSAFE,
)
# Conditions about processes that serve every gateway: a gateway scope means nothing to them.
EVERY_GATEWAY_CONDITIONS = (AlertRule.WORKER_SILENT, AlertRule.BEAT_SILENT)


def private_targets_allowed() -> bool:
    return bool(getattr(settings, "OPENSQUILLA_ALERT_ALLOW_PRIVATE_TARGETS", False))


def check_destination(url: str) -> tuple[str, int, list[str]]:
    """Scheme, host and address checks shared by validation and every delivery."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https"):
        raise ValidationError("Enter an http:// or https:// URL.")
    if not parts.hostname:
        raise ValidationError("The URL has no host.")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise ValidationError("The URL's port is not a number between 1 and 65535.") from exc
    addresses = _resolve(parts.hostname, port)
    if not private_targets_allowed():
        private = [a for a in addresses if _is_private(a)]
        if private:
            raise ValidationError(
                "The URL points to a private or local address, which this site does not allow "
                "(OPENSQUILLA_ALERT_ALLOW_PRIVATE_TARGETS)."
            )
    return parts.hostname, port, addresses


def validate_webhook_url(url: str) -> None:
    host, port, addresses = check_destination(url)
    for address in addresses:
        try:
            with socket.create_connection((address, port), timeout=CONNECT_CHECK_TIMEOUT_S):
                return
        except OSError:
            continue
    raise ValidationError(f"Nothing answers at {host}:{port}: the URL is unreachable.")


def email_recipients(target: str) -> list[str]:
    return [part.strip() for part in target.replace(";", ",").split(",") if part.strip()]


def validate_emails(target: str) -> None:
    recipients = email_recipients(target)
    if not recipients:
        raise ValidationError("Enter at least one e-mail address.")
    bad = []
    for address in recipients:
        try:
            validate_email(address)
        except ValidationError:
            bad.append(address)
    if bad:
        raise ValidationError(f"Not a valid e-mail address: {', '.join(bad)}.")


def validate_rule(
    *,
    condition: str,
    threshold: float | None,
    channel: str,
    target: str,
    gateway: str | None = None,
) -> dict[str, str]:
    """Field name → message for everything wrong with the rule (empty: the rule is fine)."""
    errors: dict[str, str] = {}
    if condition not in dict(AlertRule.CONDITIONS):
        errors["condition"] = "Choose one of the listed conditions."
    elif gateway and condition in EVERY_GATEWAY_CONDITIONS:
        errors["gateway"] = (
            "Workers and beat serve every gateway: leave the gateway empty for this condition."
        )
    if gateway and not Gateway.objects.filter(name=gateway).exists():
        errors["gateway"] = f"There is no gateway {gateway!r}."
    if threshold is None:
        errors["threshold"] = "Enter a threshold."
    elif threshold <= 0:
        errors["threshold"] = "The threshold must be greater than zero."
    elif condition in COUNT_CONDITIONS and threshold != int(threshold):
        errors["threshold"] = "This condition counts receipts: enter a whole number."
    target = (target or "").strip()
    try:
        if channel in (AlertRule.WEBHOOK, AlertRule.SLACK):
            validate_webhook_url(target)
        elif channel == AlertRule.EMAIL:
            validate_emails(target)
        else:
            errors["channel"] = "Choose one of the listed channels."
    except ValidationError as exc:
        errors["target"] = " ".join(exc.messages)
    return errors


def masked_target(rule: AlertRule) -> str:
    """What pages may show of a target: scheme and host of a URL (its path often holds a token)."""
    if rule.channel == AlertRule.EMAIL:
        return rule.target
    parts = urlsplit(rule.target)
    if not parts.hostname:
        return "(invalid URL)"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}/…"
