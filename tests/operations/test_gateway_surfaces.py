"""/metrics, alerts, health and time at risk speak gateway: the same agent name on two gateways
is two series, two subjects, two rows, and ``?gateway=`` narrows each to one gateway."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client

from opensquilla_site import timeutil
from opensquilla_site.exceptions import ValidationFailed
from operations_app.alerts.evaluate import evaluate_alerts
from operations_app.alerts.service import save_rule, send_test
from operations_app.models import AlertDelivery, AlertIncident, AlertRule
from operations_app.time_at_risk import time_at_risk_by_agent, track_time_at_risk
from receipts_app.audit import Actor
from receipts_app.models import MemoryDurableReceipt
from receipts_app.requeue import acknowledge_receipt
from sessions_app.gateways import ensure_gateway, using_gateway
from tests.factories import make_receipt, make_user
from tests.operations.receivers import http_receiver

from .test_metrics import scrape

pytestmark = pytest.mark.django_db
HOUR = 3600_000
SECRET = "whsec-gateway-secret-0123456789"


@pytest.fixture
def two_gateways():
    """Gateways ``a`` and ``b`` both run an agent ``main``: a has one failure, b two failures
    and a due repair."""
    now = timeutil.now_ms()
    for name in ("a", "b"):
        ensure_gateway(name)
    with using_gateway("a"):
        make_receipt(session_key="agent:main:webchat:x", status="checkpoint_failed")
        make_receipt(session_key="agent:main:webchat:y", status="checkpoint_saved")
    with using_gateway("b"):
        make_receipt(session_key="agent:main:webchat:x", status="checkpoint_failed")
        make_receipt(session_key="agent:main:webchat:z", status="repair_failed", scope="repair")
        make_receipt(
            session_key="agent:main:webchat:w",
            scope="repair",
            status="repair_pending",
            next_retry_at_ms=now - 60_000,
        )


def _labels(**labels: str) -> tuple:
    return tuple(sorted(labels.items()))


# --- /metrics ---------------------------------------------------------------------------------


def test_the_same_agent_on_two_gateways_is_two_series(read_token, two_gateways):
    samples = scrape(read_token)
    at_risk = samples["opensquilla_memory_at_risk"]
    assert at_risk[_labels(agent="main", gateway="a")] == 1
    assert at_risk[_labels(agent="main", gateway="b")] == 2
    backlog = samples["opensquilla_repair_backlog"]
    assert backlog[_labels(agent="main", gateway="a")] == 0
    assert backlog[_labels(agent="main", gateway="b")] == 1
    due = samples["opensquilla_repair_oldest_due_age_seconds"]
    assert set(due) == {_labels(agent="main", gateway="b")}
    ages = samples["opensquilla_memory_at_risk_oldest_age_seconds"]
    assert set(ages) == {_labels(agent="main", gateway=g) for g in ("a", "b")}


def test_no_series_with_an_agent_lacks_a_gateway(read_token, two_gateways):
    samples = scrape(read_token)
    with_agent = [
        (name, dict(key)) for name, series in samples.items() for key in series if dict(key)
    ]
    with_agent = [(name, labels) for name, labels in with_agent if "agent" in labels]
    assert with_agent  # the ledger series are there
    assert [(n, labels) for n, labels in with_agent if not labels.get("gateway")] == []


# --- alerts -----------------------------------------------------------------------------------


def _rule(url: str, condition: str = AlertRule.FAILURE_STATUS, **extra) -> AlertRule:
    values = {
        "name": f"{condition} {extra.get('gateway') or 'all'}",
        "condition": condition,
        "threshold": 1,
        "channel": "webhook",
        "target": url,
    }
    values.update(extra)
    return save_rule(values=values, actor="ada", secret=SECRET)


def test_a_rule_scoped_to_a_gateway_fires_for_its_failures_only(
    allow_local_targets, run_deliveries_inline, django_capture_on_commit_callbacks
):
    for name in ("a", "b"):
        ensure_gateway(name)
    with http_receiver() as receiver:
        rule = _rule(receiver.url, gateway="b", agent="main")
        with using_gateway("a"):
            make_receipt(session_key="agent:main:webchat:x", status="checkpoint_failed")
        with django_capture_on_commit_callbacks(execute=True):
            assert evaluate_alerts().opened == 0  # a's failure is not b's
        with using_gateway("b"):
            make_receipt(session_key="agent:main:webchat:x", status="checkpoint_failed")
        with django_capture_on_commit_callbacks(execute=True):
            assert evaluate_alerts().opened == 1
        (sent,) = [json.loads(r.body) for r in receiver.requests]
    incident = AlertIncident.objects.get(rule=rule)
    assert (incident.subject, incident.gateway_id, incident.value) == ("b/main", "b", 1)
    assert sent["gateway"] == "b" and sent["rule_gateway"] == "b"
    assert "gateway b" in sent["summary"]


def test_an_unscoped_rule_names_the_gateway_of_each_firing(allow_local_targets, two_gateways):
    with http_receiver() as receiver:
        rule = _rule(receiver.url, AlertRule.BACKLOG_COUNT, threshold=1)
        everywhere = _rule(receiver.url, agent="main")
    with using_gateway("b"):  # b's backlog is 2, a's 0
        make_receipt(session_key="agent:main:webchat:v", scope="repair", status="repair_pending")
    evaluate_alerts()
    backlog = AlertDelivery.objects.get(rule=rule).payload
    assert (backlog["subject"], backlog["gateway"], backlog["rule_gateway"]) == (
        "b/main",
        "b",
        None,
    )
    assert "agent main on gateway b" in backlog["summary"]
    payloads = {
        d.payload["gateway"]: d.payload for d in AlertDelivery.objects.filter(rule=everywhere)
    }
    assert set(payloads) == {"a", "b"}
    assert payloads["a"]["value"] == 1 and payloads["b"]["value"] == 2
    assert "on gateway a" in payloads["a"]["summary"]
    assert "on gateway b" in payloads["b"]["summary"]


def test_a_resolved_notice_and_a_test_notice_name_the_gateway(allow_local_targets):
    ensure_gateway("b")
    with using_gateway("b"):
        failed = make_receipt(session_key="agent:main:webchat:x", status="checkpoint_failed")
    with http_receiver() as receiver:
        rule = _rule(receiver.url, gateway="b")
    evaluate_alerts()
    acknowledge_receipt(receipt_id=failed.receipt_id, actor=Actor("ada", "console"), reason="ok")
    evaluate_alerts()
    resolved = AlertDelivery.objects.get(rule=rule, kind="resolved").payload
    assert resolved["gateway"] == "b" and "gateway b" in resolved["summary"]
    test = send_test(rule, actor="ada").payload
    assert test["rule_gateway"] == "b" and "gateway b" in test["summary"]


def test_a_gateway_scope_is_refused_where_it_means_nothing(allow_local_targets):
    ensure_gateway("b")
    with http_receiver() as receiver:
        with pytest.raises(ValidationFailed) as refused:
            _rule(receiver.url, AlertRule.WORKER_SILENT, threshold=60, gateway="b")
        assert "every gateway" in refused.value.extra["fields"]["gateway"]
        with pytest.raises(ValidationFailed) as unknown:
            _rule(receiver.url, gateway="nowhere")
        assert "nowhere" in unknown.value.extra["fields"]["gateway"]


def test_the_console_form_scopes_a_rule_to_a_gateway(allow_local_targets):
    ensure_gateway("b")
    make_user("ada", "admin")
    admin = Client()
    admin.login(username="ada", password="pw-Secret-123")
    form = admin.get("/operations/alerts/new/").content.decode()
    assert 'name="gateway"' in form and "Every gateway" in form
    with http_receiver() as receiver:
        data = {
            "name": "b's failures",
            "condition": "failure_status",
            "gateway": "b",
            "agent": "",
            "scope": "",
            "threshold": "1",
            "channel": "webhook",
            "target": receiver.url,
            "secret": SECRET,
            "cooldown_seconds": "3600",
            "enabled": "on",
        }
        assert admin.post("/operations/alerts/new/", data).status_code == 302
    assert AlertRule.objects.get().gateway_id == "b"
    listed = admin.get("/operations/alerts/").content.decode()
    assert "gateway <code>b</code>" in listed


# --- health -----------------------------------------------------------------------------------


def test_health_is_one_item_per_gateway_and_agent_and_gateway_narrows_it(read_token, two_gateways):
    def get(path: str) -> dict:
        response = Client().get(path, HTTP_AUTHORIZATION=f"Bearer {read_token}")
        assert response.status_code == 200, response.content
        return response.json()

    items = {(i["gateway"], i["agentId"]): i for i in get("/api/v1/health")["items"]}
    assert set(items) == {("a", "main"), ("b", "main")}
    assert items[("a", "main")]["atRisk"]["count"] == 1
    assert items[("b", "main")]["atRisk"]["count"] == 2
    assert items[("b", "main")]["atRisk"]["filter"]["gateway"] == "b"
    assert items[("b", "main")]["semanticMemory"]["repairBacklogCount"] == 1
    assert items[("a", "main")]["semanticMemory"]["repairBacklogCount"] == 0
    only_b = get("/api/v1/health?gateway=b")["items"]
    assert [(i["gateway"], i["atRisk"]["count"]) for i in only_b] == [("b", 2)]
    # One agent: every gateway's rows together, or one gateway's.
    both = get("/api/v1/health/main")
    assert (both["gateway"], both["atRisk"]["count"]) == (None, 3)
    assert get("/api/v1/health/main?gateway=a")["atRisk"]["count"] == 1
    missing = Client().get(
        "/api/v1/health?gateway=nowhere", HTTP_AUTHORIZATION=f"Bearer {read_token}"
    )
    assert missing.status_code == 404


# --- time at risk -----------------------------------------------------------------------------


def test_time_at_risk_is_per_gateway_and_agent(two_gateways):
    now = timeutil.now_ms()
    track_time_at_risk(now=now - HOUR)
    rows = {(r.gateway, r.agent): r for r in time_at_risk_by_agent(now=now)}
    assert {k: r.open_failures for k, r in rows.items()} == {("a", "main"): 1, ("b", "main"): 2}
    # A recovery on b counts in b's mean time to recovery only.
    with using_gateway("b"):
        repair = MemoryDurableReceipt.objects.get(status="repair_failed")
    acknowledge_receipt(receipt_id=repair.receipt_id, actor=Actor("ada", "console"), reason="ok")
    track_time_at_risk(now=now)
    rows = {(r.gateway, r.agent): r for r in time_at_risk_by_agent(now=now)}
    assert (rows[("b", "main")].resolved_30d, rows[("b", "main")].open_failures) == (1, 1)
    assert rows[("a", "main")].resolved_30d == 0
    with using_gateway("a"):
        only_a = time_at_risk_by_agent(now=now)
    assert [(r.gateway, r.open_failures) for r in only_a] == [("a", 1)]


def test_the_panel_shows_the_gateway_column_with_several_gateways(two_gateways):
    make_user("vera", "viewer")
    viewer = Client()
    viewer.login(username="vera", password="pw-Secret-123")
    panel = viewer.get("/operations/time-at-risk/").content.decode()
    assert "<th>Gateway</th>" in panel
    cells = re.findall(r'<td class="gateway"><code>([^<]+)</code></td>', panel)
    assert cells == ["a", "b"]
    narrowed = viewer.get("/operations/time-at-risk/?gateway=b").content.decode()
    assert re.findall(r'<td class="gateway"><code>([^<]+)</code></td>', narrowed) == ["b"]


def test_the_panel_has_no_gateway_column_with_one_gateway():
    make_receipt(session_key="agent:main:webchat:x", status="checkpoint_failed")
    make_user("vera", "viewer")
    viewer = Client()
    viewer.login(username="vera", password="pw-Secret-123")
    panel = viewer.get("/operations/time-at-risk/").content.decode()
    assert "<th>Gateway</th>" not in panel and "<code>main</code>" in panel
