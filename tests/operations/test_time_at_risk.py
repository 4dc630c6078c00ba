"""Time at risk: each failure's time to resolution, per agent now, and MTTR over 30/90 days."""

from __future__ import annotations

import pytest
from django.test import Client

from opensquilla_site import timeutil
from operations_app.models import RiskDaily, RiskInterval
from operations_app.tasks import track_time_at_risk as track_task
from operations_app.time_at_risk import time_at_risk_by_agent, track_time_at_risk
from receipts_app import ledger
from receipts_app.audit import Actor
from receipts_app.models import MemoryDurableReceipt
from receipts_app.requeue import acknowledge_receipt
from tests.factories import make_receipt, make_user

pytestmark = pytest.mark.django_db
HOUR = 3600_000
ADA = Actor("ada", "console")


def _at(receipt: MemoryDurableReceipt, **fields) -> None:
    MemoryDurableReceipt.objects.filter(pk=receipt.pk).update(**fields)


def test_a_failure_is_tracked_until_it_is_acknowledged():
    now = timeutil.now_ms()
    failed = make_receipt(session_key="agent:main:webchat:a", status="checkpoint_failed")
    _at(failed, created_at=now - 5 * HOUR, updated_at=now - 5 * HOUR)
    assert track_time_at_risk(now=now).opened == 1
    assert track_time_at_risk(now=now).opened == 0  # once per failure
    (agent,) = time_at_risk_by_agent(now=now)
    assert agent.agent == "main" and agent.open_failures == 1
    assert agent.at_risk_for_s == 5 * 3600

    acknowledge_receipt(receipt_id=failed.receipt_id, actor=ADA, reason="known outage")
    _at(failed, updated_at=now - 2 * HOUR)  # the acknowledging write, 3 h after the failure
    assert track_time_at_risk(now=now).closed == 1
    interval = RiskInterval.objects.get()
    assert interval.resolution == "acknowledged"
    assert interval.resolved_at - interval.started_at == 3 * HOUR
    (agent,) = time_at_risk_by_agent(now=now)
    assert agent.open_failures == 0 and agent.at_risk_for_s is None
    assert agent.mttr_30d_s == 3 * 3600 and agent.resolved_30d == 1


def test_a_requeued_checkpoint_stays_at_risk_until_recovered():
    now = timeutil.now_ms()
    failed = make_receipt(session_key="agent:main:webchat:b", status="checkpoint_failed")
    _at(failed, updated_at=now - 4 * HOUR)
    track_time_at_risk(now=now)
    _at(failed, status="checkpoint_requeued", updated_at=now - 3 * HOUR)
    assert track_time_at_risk(now=now).closed == 0
    _at(failed, status="checkpoint_recovered", updated_at=now - HOUR)
    assert track_time_at_risk(now=now).closed == 1
    assert RiskInterval.objects.get().resolution == "checkpoint_recovered"


def test_a_purged_receipt_closes_its_interval():
    failed = make_receipt(session_key="agent:main:webchat:c", status="repair_abandoned")
    track_time_at_risk()
    ledger.purge_receipts_for_session_key("agent:main:webchat:c")
    assert track_time_at_risk().closed == 1
    assert RiskInterval.objects.get(receipt_id=failed.receipt_id).resolution == "purged"


def test_mttr_30_and_90_days_come_from_the_daily_rollups():
    now = timeutil.now_ms()
    day = 24 * HOUR
    # Two recoveries 10 days ago (1 h and 3 h) and one 60 days ago (10 h).
    for age_days, hours in ((10, 1), (10, 3), (60, 10)):
        r = make_receipt(
            session_key=f"agent:ops:webchat:{age_days}-{hours}", status="checkpoint_failed"
        )
        _at(r, updated_at=now - age_days * day - hours * HOUR)
        track_time_at_risk(now=now)
        _at(r, status="checkpoint_recovered", updated_at=now - age_days * day)
        track_time_at_risk(now=now)
    (agent,) = time_at_risk_by_agent(now=now)
    assert agent.resolved_30d == 2 and agent.mttr_30d_s == 2 * 3600
    assert agent.resolved_90d == 3 and agent.mttr_90d_s == (1 + 3 + 10) / 3 * 3600
    assert len(agent.daily_mttr_s) == 90
    assert sum(1 for v in agent.daily_mttr_s if v) == 2
    assert RiskDaily.objects.count() == 2


def test_the_overview_shows_time_at_risk(viewer_page):
    now = timeutil.now_ms()
    for i in range(3):
        r = make_receipt(session_key=f"agent:a{i}:webchat:x", status="checkpoint_failed")
        _at(r, created_at=now - 2 * 24 * HOUR - 60_000, updated_at=now - 2 * 24 * HOUR - 60_000)
    track_task.apply()
    # The overview loads the panel from its own URL once it has rendered.
    overview = viewer_page.get("/").content.decode()
    assert 'hx-get="/operations/time-at-risk/"' in overview
    html = viewer_page.get("/operations/time-at-risk/").content.decode()
    assert "Time at risk" in html
    assert html.count("<strong>2 d</strong>") == 3


def test_the_panel_reads_three_queries_whatever_the_history(django_assert_num_queries):
    now = timeutil.now_ms()
    for i in range(30):
        r = make_receipt(session_key=f"agent:a{i % 6}:webchat:{i}", status="checkpoint_failed")
        _at(r, updated_at=now - (i + 1) * 24 * HOUR)
        track_time_at_risk(now=now)
        if i % 2:
            _at(r, status="checkpoint_superseded", updated_at=now - i * 24 * HOUR)
    track_time_at_risk(now=now)
    # The counts, one probe of the oldest rows at risk, the daily rollups.
    with django_assert_num_queries(3):
        agents = time_at_risk_by_agent(now=now)
    assert len(agents) == 6


@pytest.fixture
def viewer_page(db) -> Client:
    make_user("vera", "viewer")
    client = Client()
    client.login(username="vera", password="pw-Secret-123")
    return client


def test_beat_schedules_the_tracking(settings):
    assert settings.CELERY_BEAT_SCHEDULE["time-at-risk"]["task"] == track_task.name


def test_a_checkpoint_the_scrub_finds_missing_is_at_risk_from_when_it_was_found(workspace):
    """Saved thirty days ago, its file deleted today: at risk for minutes, not thirty days, on
    the time-at-risk panel, /metrics' age and the at-risk-age alert. A failure still counts
    from when it was written."""
    from operations_app.alerts.conditions import Snapshot, firing_subjects
    from operations_app.ledger_state import agent_signals
    from operations_app.models import AlertRule
    from receipts_app.checkpoint import record_memory_checkpoint
    from receipts_app.scrub import scrub_checkpoints
    from tests.factories import make_session

    now = timeutil.now_ms()
    saved = record_memory_checkpoint(make_session("agent:main:webchat:old", messages=3).session_key)
    _at(saved, created_at=now - 30 * 24 * HOUR, updated_at=now - 30 * 24 * HOUR)
    (workspace / saved.source_path).unlink()
    scrub_checkpoints("local", force=True)
    assert MemoryDurableReceipt.objects.get(pk=saved.pk).status == "checkpoint_missing"

    [entry] = [a for a in time_at_risk_by_agent() if a.agent == "main"]
    assert entry.open_failures == 1 and entry.at_risk_for_s < 600
    assert agent_signals()[("local", "main")].oldest_at_risk_age_s < 600
    rule = AlertRule.objects.create(
        name="an hour at risk",
        condition=AlertRule.AT_RISK_AGE,
        threshold=3600,
        channel=AlertRule.WEBHOOK,
        target="https://alerts.example.com/hook",
    )
    assert firing_subjects(rule, Snapshot.read()) == {}

    failed = make_receipt(status="checkpoint_failed", agent_id="main")
    _at(failed, created_at=now - 5 * HOUR, updated_at=now - 5 * HOUR)
    [entry] = [a for a in time_at_risk_by_agent() if a.agent == "main"]
    assert entry.open_failures == 2 and entry.at_risk_for_s >= 5 * 3600 - 60
    assert list(firing_subjects(rule, Snapshot.read())) == ["local/main"]


def test_since_when_a_found_checkpoint_is_at_risk_is_one_index_probe():
    """The probe repeats idx_mdr_unsafe_found's condition, so both planners serve it from
    that index (a few pages) at any ledger size, not from the agent's every row."""
    from operations_app.ledger_state import _since_probe
    from tests.query_plans import plan_of

    params = ["local", "main", "main", "checkpoint_missing", "local"]
    plan = plan_of(_since_probe("checkpoint_missing"), params)
    assert "idx_mdr_unsafe_found" in plan, plan
