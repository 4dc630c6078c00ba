"""/metrics as Prometheus scrapes it: who may read it, what it says, what a scrape costs."""

from __future__ import annotations

import pytest
from celery import shared_task, signals
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from prometheus_client.parser import text_string_to_metric_families

from opensquilla_site import timeutil
from opensquilla_site.models import ApiToken
from opensquilla_site.tokens import revoke_api_token
from operations_app import celery_signals, pulse
from receipts_app.audit import Actor
from receipts_app.requeue import (
    create_requeue_plan,
    requeue_receipt,
    run_requeue_plan,
    start_requeue_plan,
)
from tests.factories import make_receipt, make_session

pytestmark = pytest.mark.django_db


@shared_task(name="tests.operations.boom")
def boom() -> None:
    raise RuntimeError("boom")


@shared_task(name="tests.operations.fine")
def fine() -> str:
    return "ok"


# Every receipts series names its gateway; rows written without one are local's.
LOCAL = ("gateway", "local")


def scrape(token: str, **extra) -> dict[str, dict[tuple, float]]:
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}", **extra)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            key = tuple(sorted(sample.labels.items()))
            samples.setdefault(sample.name, {})[key] = sample.value
    return samples


def _seed() -> None:
    make_receipt(session_key="agent:main:webchat:a", status="checkpoint_saved")
    make_receipt(session_key="agent:main:webchat:b", status="checkpoint_saved")
    make_receipt(session_key="agent:main:webchat:c", status="checkpoint_failed", reason="disk")
    make_receipt(
        session_key="agent:ops:webchat:d",
        scope="repair",
        status="repair_pending",
        next_retry_at_ms=timeutil.now_ms() - 60_000,
    )
    make_receipt(
        session_key="agent:ops:webchat:e",
        scope="repair",
        status="repair_pending",
        next_retry_at_ms=timeutil.now_ms() + 3_600_000,
    )
    make_receipt(session_key="agent:ops:webchat:f", scope="repair", status="repair_abandoned")


def test_anonymous_and_bad_tokens_are_refused_with_json():
    response = Client().get("/metrics")
    assert response.status_code == 401
    assert response.json()["code"] == "unauthorized"
    assert response["WWW-Authenticate"].startswith("Bearer")
    bad = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer osq_nope_nope")
    assert bad.status_code == 401


def test_a_revoked_token_is_refused(read_token):
    revoke_api_token(token_id=ApiToken.objects.get(name="prometheus").pk)
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {read_token}")
    assert response.status_code == 401


def test_listed_networks_scrape_without_a_token(settings):
    settings.OPENSQUILLA_METRICS_ALLOWED_NETWORKS = ["10.0.0.0/8"]
    assert Client(REMOTE_ADDR="10.2.3.4").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="192.0.2.7").get("/metrics").status_code == 401
    # A forwarded-for header is the client's say-so: it never opens the endpoint.
    spoofed = Client(REMOTE_ADDR="192.0.2.7", HTTP_X_FORWARDED_FOR="10.2.3.4")
    assert spoofed.get("/metrics").status_code == 401


def test_receipts_backlog_and_risk_per_agent(read_token):
    _seed()
    samples = scrape(read_token)
    receipts = samples["opensquilla_receipts"]
    assert (
        receipts[
            (("agent", "main"), LOCAL, ("scope", "checkpoint"), ("status", "checkpoint_saved"))
        ]
        == 2
    )
    assert (
        receipts[
            (("agent", "main"), LOCAL, ("scope", "checkpoint"), ("status", "checkpoint_failed"))
        ]
        == 1
    )
    assert (
        receipts[(("agent", "ops"), LOCAL, ("scope", "repair"), ("status", "repair_pending"))] == 2
    )
    assert samples["opensquilla_repair_backlog"][(("agent", "ops"), LOCAL)] == 2
    assert samples["opensquilla_repair_backlog"][(("agent", "main"), LOCAL)] == 0
    # Only the repair that is due has an age; the one waiting on its backoff does not count.
    assert samples["opensquilla_repair_oldest_due_age_seconds"][(("agent", "ops"), LOCAL)] >= 60
    assert (("agent", "main"), LOCAL) not in samples["opensquilla_repair_oldest_due_age_seconds"]
    assert samples["opensquilla_memory_at_risk"][(("agent", "main"), LOCAL)] == 1
    assert samples["opensquilla_memory_at_risk"][(("agent", "ops"), LOCAL)] == 1
    assert (("agent", "main"), LOCAL) in samples["opensquilla_memory_at_risk_oldest_age_seconds"]


def test_requeue_outcomes_and_plan_rows_are_counted(read_token, workspace):
    session = make_session("agent:main:webchat:rq", messages=2)
    failed = [
        make_receipt(
            session_key=session.session_key,
            session_id=session.session_id,
            scope="repair",
            status="repair_failed",
        )
        for _ in range(3)
    ]
    actor = Actor("otto", "console")
    requeue_receipt(receipt_id=failed[0].receipt_id, actor=actor)
    requeue_receipt(receipt_id="no-such-receipt", actor=actor)
    plan = create_requeue_plan(
        filters={}, receipt_ids=[r.receipt_id for r in failed[1:]], actor=actor
    )
    start_requeue_plan(plan_id=plan.plan_id, actor=actor)
    run_requeue_plan(plan.plan_id, batch_size=10)
    samples = scrape(read_token)
    outcomes = samples["opensquilla_requeue_outcomes_total"]
    assert outcomes[(("outcome", "requeued"),)] == 3
    assert outcomes[(("outcome", "not_found"),)] == 1
    assert samples["opensquilla_plan_rows_processed_total"][()] == 2


def test_task_runs_failures_and_durations(read_token):
    fine.apply()
    fine.apply()
    boom.apply(throw=False)
    samples = scrape(read_token)
    assert samples["opensquilla_task_runs_total"][(("task", "tests.operations.fine"),)] == 2
    assert samples["opensquilla_task_failures_total"][(("task", "tests.operations.fine"),)] == 0
    assert samples["opensquilla_task_failures_total"][(("task", "tests.operations.boom"),)] == 1
    assert (
        samples["opensquilla_task_duration_seconds_count"][(("task", "tests.operations.fine"),)]
        == 2
    )
    assert (
        samples["opensquilla_task_duration_seconds_sum"][(("task", "tests.operations.fine"),)] >= 0
    )


class _Worker:
    """What Celery passes as the sender: something with a ``hostname``."""

    def __init__(self, hostname: str) -> None:
        self.hostname = hostname


def test_worker_and_beat_heartbeats(read_token, monkeypatch):
    # A ready worker starts its beat watch and its heartbeat thread; here they would outlive
    # the test and query the database from outside any test (and hold the test database).
    watches = []
    monkeypatch.setattr(celery_signals, "_start_beat_watch", lambda: watches.append(1))
    beating: list[pulse.Pulse] = []
    monkeypatch.setattr(pulse.Pulse, "_spawn", lambda self: beating.append(self))
    worker = _Worker("celery@box-1")
    signals.worker_ready.send(sender=worker)
    signals.worker_ready.send(sender=_Worker("celery@box-2"))
    assert watches == [1, 1] and {p.name for p in beating} == {"celery@box-1", "celery@box-2"}
    beating[1].beat()  # what its thread does every interval
    signals.beat_init.send(sender=None)
    samples = scrape(read_token)
    workers = samples["opensquilla_worker_last_heartbeat_timestamp_seconds"]
    assert set(workers) == {(("worker", "celery@box-1"),), (("worker", "celery@box-2"),)}
    assert len(samples["opensquilla_beat_last_tick_timestamp_seconds"]) == 1
    signals.worker_shutdown.send(sender=worker)
    after = scrape(read_token)["opensquilla_worker_last_heartbeat_timestamp_seconds"]
    assert set(after) == {(("worker", "celery@box-2"),)}
    pulse.stop_pulse("worker", "celery@box-2")


def test_a_scrape_costs_the_same_queries_for_10_rows_as_for_200(read_token):
    _seed()
    client = Client()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {read_token}"}
    client.get("/metrics", **headers)  # first call stamps the token's last use
    with CaptureQueriesContext(connection) as small:
        assert client.get("/metrics", **headers).status_code == 200
    for i in range(200):
        make_receipt(
            session_key=f"agent:a{i % 7}:webchat:{i}",
            status="checkpoint_failed" if i % 3 else "repair_pending",
            scope="checkpoint" if i % 3 else "repair",
        )
    with CaptureQueriesContext(connection) as large:
        assert client.get("/metrics", **headers).status_code == 200
    assert len(large.captured_queries) == len(small.captured_queries)
    # 8, plus one for the gateway link's stored readings (none here; two when linked).
    assert len(small.captured_queries) <= 9
