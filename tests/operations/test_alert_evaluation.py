"""Alert evaluation as beat runs it: one notice per incident, cooldown, and a resolved notice."""

from __future__ import annotations

import json

import pytest

from opensquilla_site import timeutil
from operations_app import heartbeats
from operations_app.alerts.evaluate import evaluate_alerts
from operations_app.alerts.service import save_rule
from operations_app.models import AlertDelivery, AlertIncident, AlertRule, Heartbeat
from operations_app.tasks import evaluate_alerts as evaluate_task
from receipts_app.audit import Actor
from receipts_app.models import MemoryDurableReceipt
from receipts_app.requeue import acknowledge_receipt
from tests.factories import make_receipt
from tests.operations.receivers import http_receiver

pytestmark = pytest.mark.django_db


def _rule(url: str, condition: str = AlertRule.FAILURE_STATUS, threshold: float = 1, **extra):
    values = {
        "name": f"{condition} rule",
        "condition": condition,
        "threshold": threshold,
        "channel": "slack",
        "target": url,
    }
    values.update(extra)
    return save_rule(values=values, actor="ada")


def _kinds(receiver) -> list[str]:
    return [json.loads(r.body)["text"].split("]")[0].strip("[") for r in receiver.requests]


def _evaluate(capture) -> None:
    with capture(execute=True):
        evaluate_task.apply()


def test_failures_fire_once_then_resolve_once(
    allow_local_targets, run_deliveries_inline, django_capture_on_commit_callbacks
):
    with http_receiver() as receiver:
        _rule(receiver.url, agent="main", cooldown_seconds=0)
        failed = make_receipt(session_key="agent:main:webchat:x", status="checkpoint_failed")
        make_receipt(session_key="agent:other:webchat:y", status="checkpoint_failed")
        _evaluate(django_capture_on_commit_callbacks)
        _evaluate(django_capture_on_commit_callbacks)  # still failing: nothing new
        make_receipt(session_key="agent:main:webchat:z", status="repair_failed", scope="repair")
        _evaluate(django_capture_on_commit_callbacks)  # more failures, same incident
        assert _kinds(receiver) == ["FIRING"]
        assert "agent main" in json.loads(receiver.requests[0].body)["text"]

        acknowledge_receipt(
            receipt_id=failed.receipt_id, actor=Actor("ada", "console"), reason="ok"
        )
        _evaluate(django_capture_on_commit_callbacks)
        assert _kinds(receiver) == ["FIRING"]  # one failure of main is left
        rest = MemoryDurableReceipt.objects.filter(agent_id="main", status="repair_failed").get()
        acknowledge_receipt(receipt_id=rest.receipt_id, actor=Actor("ada", "console"), reason="ok")
        _evaluate(django_capture_on_commit_callbacks)
        assert _kinds(receiver) == ["FIRING", "RESOLVED"]
    incident = AlertIncident.objects.get()
    assert incident.subject == "local/main" and incident.resolved_at is not None


def test_a_flapping_condition_inside_the_cooldown_is_not_sent_again(
    allow_local_targets, run_deliveries_inline, django_capture_on_commit_callbacks
):
    with http_receiver() as receiver:
        _rule(receiver.url, cooldown_seconds=3600)
        first = make_receipt(session_key="agent:main:webchat:a", status="checkpoint_failed")
        _evaluate(django_capture_on_commit_callbacks)
        acknowledge_receipt(receipt_id=first.receipt_id, actor=Actor("ada", "console"), reason="x")
        _evaluate(django_capture_on_commit_callbacks)
        make_receipt(session_key="agent:main:webchat:b", status="checkpoint_failed")
        _evaluate(django_capture_on_commit_callbacks)
        assert _kinds(receiver) == ["FIRING", "RESOLVED"]
    reopened = AlertIncident.objects.filter(resolved_at__isnull=True).get()
    assert reopened.notified is False


def test_scope_filter_and_count_threshold(allow_local_targets):
    with http_receiver() as receiver:
        rule = _rule(receiver.url, scope="repair", threshold=2)
    make_receipt(session_key="agent:main:webchat:a", status="checkpoint_failed")
    make_receipt(session_key="agent:main:webchat:b", status="repair_failed", scope="repair")
    assert evaluate_alerts().opened == 0
    make_receipt(session_key="agent:main:webchat:c", status="repair_abandoned", scope="repair")
    assert evaluate_alerts().opened == 1
    assert AlertIncident.objects.get(rule=rule).value == 2


def test_backlog_and_risk_age_conditions(allow_local_targets):
    now = timeutil.now_ms()
    with http_receiver() as receiver:
        backlog = _rule(receiver.url, AlertRule.BACKLOG_COUNT, threshold=1)
        backlog_age = _rule(receiver.url, AlertRule.BACKLOG_AGE, threshold=600)
        risk_age = _rule(receiver.url, AlertRule.AT_RISK_AGE, threshold=3600)
    for i in range(2):
        make_receipt(
            session_key=f"agent:ops:webchat:{i}",
            scope="repair",
            status="repair_pending",
            next_retry_at_ms=now - 3600_000,
        )
    make_receipt(
        session_key="agent:ops:webchat:old",
        status="checkpoint_failed",
        created_at=now - 2 * 3600_000,
    )
    evaluate_alerts()
    opened = {i.rule_id: i.subject for i in AlertIncident.objects.all()}
    assert opened == {
        backlog.pk: "local/ops",
        backlog_age.pk: "local/ops",
        risk_age.pk: "local/ops",
    }


def test_silent_workers_and_beat(allow_local_targets):
    with http_receiver() as receiver:
        worker_rule = _rule(receiver.url, AlertRule.WORKER_SILENT, threshold=120)
        beat_rule = _rule(receiver.url, AlertRule.BEAT_SILENT, threshold=120)
    heartbeats.mark_started("worker", "celery@a")
    heartbeats.mark_started("beat", "beat@a")
    assert evaluate_alerts().opened == 0
    Heartbeat.objects.update(seen_at=timeutil.now_ms() - 600_000)
    evaluate_alerts()
    assert set(AlertIncident.objects.values_list("rule_id", "subject")) == {
        (worker_rule.pk, "worker"),
        (beat_rule.pk, "beat"),
    }
    heartbeats.mark_started("worker", "celery@b")
    out = evaluate_alerts()
    assert out.resolved == 1
    assert AlertIncident.objects.get(rule=worker_rule).resolved_at is not None


def test_a_disabled_rule_is_not_evaluated(allow_local_targets):
    with http_receiver() as receiver:
        _rule(receiver.url, enabled=False)
    make_receipt(status="checkpoint_failed")
    assert evaluate_alerts().opened == 0
    assert not AlertDelivery.objects.exists()


def test_beat_schedules_the_evaluation(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["evaluate-alerts"]
    assert entry["task"] == evaluate_task.name
