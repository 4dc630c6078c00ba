"""Create, change and test alert rules: the one place the console and the admin call."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from opensquilla_site import timeutil
from opensquilla_site.exceptions import ValidationFailed

from ..models import AlertDelivery, AlertRule
from .delivery import enqueue
from .evaluate import payload_for
from .validation import validate_rule

EDITABLE = (
    "name",
    "condition",
    "gateway",
    "agent",
    "scope",
    "threshold",
    "channel",
    "target",
    "cooldown_seconds",
    "enabled",
)
MIN_SECRET_LENGTH = 16


def check_rule(rule: AlertRule, *, secret_given: bool) -> None:
    """Raise ``ValidationFailed`` (with per-field messages) when the rule cannot be saved."""
    errors = validate_rule(
        condition=rule.condition,
        threshold=rule.threshold,
        channel=rule.channel,
        target=rule.target,
        gateway=rule.gateway_id,
    )
    if not (rule.name or "").strip():
        errors["name"] = "Give the alert a name."
    if rule.channel == AlertRule.WEBHOOK:
        if not rule.secret:
            errors["secret"] = "A JSON webhook is signed: enter a secret the receiver also knows."
        elif secret_given and len(rule.secret) < MIN_SECRET_LENGTH:
            errors["secret"] = f"Use at least {MIN_SECRET_LENGTH} characters."
    if errors:
        raise ValidationFailed("The alert rule needs fixing.", extra={"fields": errors})


def save_rule(
    *, values: dict[str, Any], actor: str, rule: AlertRule | None = None, secret: str = ""
) -> AlertRule:
    """Create (``rule`` None) or update a rule. A blank ``secret`` keeps the stored one."""
    rule = rule if rule is not None else AlertRule()
    for name in EDITABLE:
        if name == "gateway" and name in values:
            # A gateway's name (or the Gateway); empty or None: every gateway.
            chosen = values[name]
            rule.gateway_id = getattr(chosen, "name", chosen) or None
        elif name in values:
            setattr(rule, name, values[name])
    rule.target = (rule.target or "").strip()
    if secret:
        rule.secret = secret
    check_rule(rule, secret_given=bool(secret))
    return store_rule(rule, actor=actor)


def store_rule(rule: AlertRule, *, actor: str) -> AlertRule:
    """Save a rule already checked (by ``save_rule`` or ``AlertRuleForm``)."""
    if not rule.pk:
        rule.created_by = actor[:150]
    rule.updated_at = timeutil.now_ms()
    with transaction.atomic():
        rule.save()
    return rule


def send_test(rule: AlertRule, *, actor: str) -> AlertDelivery:
    """Queue a test notice through the rule's channel; its attempts show like any other."""
    now = timeutil.now_ms()
    where = f"gateway {rule.gateway_id}" if rule.gateway_id else "every gateway"
    payload = payload_for(
        rule,
        "test",
        subject="test",
        summary=f"test notice sent by {actor} for a rule on {where}; the channel works",
        value=None,
        now=now,
        gateway=rule.gateway_id or "",
    )
    with transaction.atomic():
        delivery = AlertDelivery.objects.create(
            rule=rule, kind="test", payload=payload, next_attempt_at=now
        )
        enqueue([delivery.pk])
    return delivery
