"""Turn what fires into incidents and notices: once per incident, with cooldown and resolve.

Per rule and subject: a new firing opens an incident and sends one "firing" notice; while it
keeps firing nothing more is sent (dedup, guarded by a unique open-incident constraint); when
it stops, the incident resolves and one "resolved" notice follows. An incident that opens
within ``cooldown_seconds`` of the previous notified one for the same subject is recorded but
not sent (nor is its resolution): a flapping condition does not page anyone twice an hour.

Every notice names its gateway: ``gateway`` in the payload is the subject's (null for workers
and beat, which serve every gateway), ``rule_gateway`` the rule's scope (null: every gateway),
and the summary text says it in words.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction

from ..models import AlertDelivery, AlertIncident, AlertRule
from .conditions import Firing, Snapshot, firing_subjects
from .delivery import enqueue, sweep_deliveries

logger = logging.getLogger(__name__)


@dataclass
class EvaluationSummary:
    opened: int = 0
    resolved: int = 0
    suppressed: int = 0
    deliveries: list[int] = field(default_factory=list)


def payload_for(
    rule: AlertRule,
    kind: str,
    *,
    subject: str,
    summary: str,
    value: float | None,
    now: int,
    gateway: str = "",
) -> dict[str, Any]:
    """The notice's content (no target, no secret): what a receiver or a person needs."""
    return {
        "alert": rule.name,
        "rule_id": rule.pk,
        "condition": rule.condition,
        "kind": kind,
        "subject": subject,
        "gateway": gateway or None,
        "rule_gateway": rule.gateway_id,
        "summary": summary,
        "value": value if value is None or value != float("inf") else None,
        "threshold": rule.threshold,
        "at": now,
    }


def _deliver(
    rule: AlertRule, incident: AlertIncident | None, kind: str, payload: dict[str, Any], now: int
) -> int:
    delivery = AlertDelivery.objects.create(
        rule=rule, incident=incident, kind=kind, payload=payload, next_attempt_at=now
    )
    return delivery.pk


def _open(rule: AlertRule, subject: str, firing: Firing, now: int, out: EvaluationSummary) -> None:
    cooldown_from = now - rule.cooldown_seconds * 1000
    in_cooldown = AlertIncident.objects.filter(
        rule=rule, subject=subject, notified=True, opened_at__gte=cooldown_from
    ).exists()
    value = None if firing.value == float("inf") else firing.value
    try:
        with transaction.atomic():
            incident = AlertIncident.objects.create(
                rule=rule,
                subject=subject,
                opened_at=now,
                notified=not in_cooldown,
                summary=firing.summary,
                value=value,
                gateway_id=firing.gateway,
            )
    except IntegrityError:
        return  # another evaluator opened it first: theirs sends the notice
    out.opened += 1
    if in_cooldown:
        out.suppressed += 1
        return
    payload = payload_for(
        rule,
        "firing",
        subject=subject,
        summary=firing.summary,
        value=value,
        now=now,
        gateway=firing.gateway,
    )
    out.deliveries.append(_deliver(rule, incident, "firing", payload, now))


def _resolve(rule: AlertRule, incident: AlertIncident, now: int, out: EvaluationSummary) -> None:
    if not AlertIncident.objects.filter(pk=incident.pk, resolved_at__isnull=True).update(
        resolved_at=now
    ):
        return
    out.resolved += 1
    if incident.notified:
        summary = f"resolved: {incident.summary}"
        payload = payload_for(
            rule,
            "resolved",
            subject=incident.subject,
            summary=summary,
            value=None,
            now=now,
            gateway=incident.gateway_id,
        )
        out.deliveries.append(_deliver(rule, incident, "resolved", payload, now))


def evaluate_rule(rule: AlertRule, snap: Snapshot, out: EvaluationSummary) -> None:
    firing = firing_subjects(rule, snap)
    open_incidents = {
        i.subject: i for i in AlertIncident.objects.filter(rule=rule, resolved_at__isnull=True)
    }
    for subject, what in firing.items():
        if subject not in open_incidents:
            _open(rule, subject, what, snap.now, out)
    for subject, incident in open_incidents.items():
        if subject not in firing:
            _resolve(rule, incident, snap.now, out)


def evaluate_alerts(
    *, conditions: Iterable[str] | None = None, now: int | None = None
) -> EvaluationSummary:
    """Evaluate every enabled rule (or those of ``conditions``) and send what changed."""
    snap = Snapshot.read(now)
    rules = AlertRule.objects.filter(enabled=True).order_by("id")
    if conditions is not None:
        rules = rules.filter(condition__in=list(conditions))
    out = EvaluationSummary()
    for rule in rules:
        try:
            with transaction.atomic():
                evaluate_rule(rule, snap, out)
        except Exception:  # noqa: BLE001 - one broken rule must not silence the others
            logger.exception("alert rule %s could not be evaluated", rule.pk)
    if out.deliveries:
        enqueue(out.deliveries)
    sweep_deliveries(snap.now)
    return out
