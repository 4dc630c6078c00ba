"""The operator is told when a gateway's work has no live worker: the requeue outcome (API and
console), the plan's dry run (API, console, CLI) and the liveness page name the gateway and its
queue. The work is accepted all the same."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from opensquilla_site.tokens import create_api_token
from operations_app import heartbeats
from receipts_app.models import OutboxMessage
from sessions_app.gateways import ensure_gateway, using_gateway
from tests.console.conftest import operator_client, viewer_client  # noqa: F401
from tests.factories import make_receipt, make_session, make_user

pytestmark = pytest.mark.django_db

KEY = "agent:main:webchat:default"
B_WAITS = "gateway b has no live worker on queue gateway.b: the work will wait until one starts"


def failed_in(gateway: str, key: str = KEY):
    ensure_gateway(gateway)
    with using_gateway(gateway):
        session = make_session(key, messages=2)
        return make_receipt(
            session_key=key,
            session_id=session.session_id,
            status="checkpoint_failed",
            reason="disk full",
        )


def test_the_requeue_response_names_a_gateway_with_no_live_worker(operator):
    row = failed_in("b")
    body = operator.post(f"/receipts/{row.receipt_id}/requeue", {"reason": "x"}).json()
    assert body["outcome"] == "requeued" and body["warning"] == B_WAITS
    # Accepted: the work waits in the outbox, on b's queue.
    assert OutboxMessage.objects.get(task_id=body["task_id"]).queue == "gateway.b"

    heartbeats.mark_started("worker", "celery@host-b", {"queues": ["gateway.b"]})
    again = failed_in("b", "agent:main:webchat:other")
    body = operator.post(f"/receipts/{again.receipt_id}/requeue").json()
    assert body["outcome"] == "requeued" and body["warning"] is None


def test_a_local_requeue_carries_no_warning(operator):
    session = make_session(messages=2)
    row = make_receipt(
        session_key=session.session_key, session_id=session.session_id, status="checkpoint_failed"
    )
    body = operator.post(f"/receipts/{row.receipt_id}/requeue").json()
    assert body["outcome"] == "requeued" and body["warning"] is None


def test_the_plan_dry_run_names_each_gateway_it_queues_work_for_without_a_worker(operator):
    failed_in("a")
    failed_in("b")
    heartbeats.mark_started("worker", "celery@host-a", {"queues": ["gateway.a"]})
    created = operator.post("/requeue-plans", {"filters": {"status": ["checkpoint_failed"]}})
    assert created.status_code == 201, created.content
    plan = created.json()
    assert plan["dry_run_counts"] == {"requeued": 2}
    assert plan["work_gateways"] == ["a", "b"]
    assert plan["warnings"] == [B_WAITS]
    # Read again once b's worker is up: the warning is gone.
    heartbeats.mark_started("worker", "celery@host-b", {"queues": ["gateway.b"]})
    assert operator.get(f"/requeue-plans/{plan['plan_id']}").json()["warnings"] == []


def test_the_console_says_it_on_the_requeue_and_the_plan_page(operator_client):  # noqa: F811
    row = failed_in("b")
    response = operator_client.post(reverse("receipts:requeue", args=[row.receipt_id]), follow=True)
    assert response.status_code == 200
    assert B_WAITS in response.content.decode()

    other = failed_in("b", "agent:main:webchat:other")
    response = operator_client.post(
        reverse("receipts:plan_create"),
        {"selected": [other.receipt_id]},
        follow=True,
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert "Dry run" in html and B_WAITS in html


def test_the_cli_dry_run_prints_it():
    row = failed_in("b")
    out = StringIO()
    call_command("requeue", "--receipt-id", row.receipt_id, "--dry-run", stdout=out)
    assert f"warning: {B_WAITS}" in out.getvalue()


def test_the_liveness_page_has_a_row_per_gateway_queue_with_its_live_workers(
    viewer_client,  # noqa: F811
    operator_client,  # noqa: F811
    settings,
    tmp_path,
):
    settings.CELERY_BROKER_URL = f"sqlite:///{tmp_path / 'broker.sqlite3'}"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {}
    ensure_gateway("a")
    ensure_gateway("b")
    heartbeats.mark_started("worker", "celery@central", {"queues": ["celery"]})
    heartbeats.mark_started("worker", "celery@host-a", {"queues": ["gateway.a"]})

    def rows_of(html: str) -> dict[str, str]:
        section = html.split('class="compact gateway-queues"')[1].split("</table>")[0]
        return {part.split('"')[0]: part for part in section.split('data-gateway="')[1:]}

    html = operator_client.get("/operations/liveness/").content.decode()
    assert "Where each gateway&#x27;s work runs" in html or "Where each gateway's work runs" in html
    rows = rows_of(html)
    assert set(rows) == {"local", "a", "b"}
    assert "celery@central" in rows["local"] and "<code>celery</code>" in rows["local"]
    assert "celery@host-a" in rows["a"] and "gateway.a" in rows["a"]
    assert "none" in rows["b"] and B_WAITS in rows["b"]
    # A viewer reads how many live workers each queue has, not their node names.
    viewers = viewer_client.get("/operations/liveness/").content.decode()
    rows = rows_of(viewers)
    assert "1 live" in rows["local"] and "1 live" in rows["a"] and "celery@" not in viewers
    assert "none" in rows["b"] and B_WAITS in rows["b"]
    # b's queue is among the queues whose depth the page reads.
    assert "<code>gateway.b</code>" in html


def test_metrics_export_each_gateways_queue_depth(db, settings, tmp_path):
    settings.CELERY_BROKER_URL = f"sqlite:///{tmp_path / 'broker.sqlite3'}"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {}
    failed_in("b")
    _token, plaintext = create_api_token(
        user=make_user("scraper", "viewer"), name="prometheus", scope="read"
    )
    body = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {plaintext}").content.decode()
    assert 'opensquilla_queue_depth{queue="gateway.b"} 0.0' in body
    assert 'opensquilla_queue_depth{queue="celery"}' in body


def test_an_in_process_checkpoint_or_flush_of_another_gateway_is_refused_not_misfiled(
    operator, workspace
):
    failed_in("b")
    checkpoint = operator.post(f"/sessions/{KEY}/checkpoints?wait=true&gateway=b", {})
    assert checkpoint.status_code == 409, checkpoint.content
    assert checkpoint.json()["code"] == "conflict"
    assert "belongs to gateway b" in checkpoint.json()["detail"]
    flush = operator.post(f"/sessions/{KEY}/flush?wait=true&gateway=b")
    assert flush.status_code == 409 and "queue it" in flush.json()["detail"]
    assert sorted(p for p in workspace.rglob("*") if p.is_file()) == []
    # Queued instead, it goes to b's own worker.
    queued = operator.post(f"/sessions/{KEY}/checkpoints?gateway=b", {})
    assert queued.status_code == 202
    assert OutboxMessage.objects.get(task_id=queued.json()["task_id"]).queue == "gateway.b"


@pytest.mark.parametrize("path", ["checkpoints", "flush"])
def test_a_queued_checkpoint_or_flush_of_a_gateway_without_a_worker_says_so(operator, path):
    failed_in("b")
    queued = operator.post(f"/sessions/{KEY}/{path}?gateway=b", {})
    assert queued.status_code == 202, queued.content
    body = queued.json()
    assert body["status"] == "queued" and body["warning"] == B_WAITS
    # Accepted all the same: the work waits in the outbox, on b's queue.
    assert OutboxMessage.objects.get(task_id=body["task_id"]).queue == "gateway.b"

    # Once b's worker is up the same trigger carries no warning; local's never does.
    heartbeats.mark_started("worker", "celery@host-b", {"queues": ["gateway.b"]})
    again = operator.post(f"/sessions/{KEY}/{path}?gateway=b", {}).json()
    assert again["status"] == "queued" and again["warning"] is None
    make_session(KEY, messages=2)
    local = operator.post(f"/sessions/{KEY}/{path}", {}).json()
    assert local["status"] == "queued" and local["warning"] is None
