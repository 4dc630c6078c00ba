"""Every list page issues the same number of queries for 3 rows as for 60 (no N+1)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from receipts_app.audit import Actor, record_event
from receipts_app.requeue import create_requeue_plan
from tests.factories import make_receipt, make_session

from .conftest import hx

pytestmark = pytest.mark.django_db


def _seed(n: int) -> None:
    for i in range(n):
        session = make_session(f"agent:main:webchat:q{i}-{n}", messages=1)
        row = make_receipt(
            session_key=session.session_key,
            session_id=session.session_id,
            status="checkpoint_failed" if i % 2 else "repair_abandoned",
            scope="checkpoint" if i % 2 else "repair",
            reason=f"error number {i} at /tmp/x{i}",
        )
        record_event(
            receipt_id=row.receipt_id,
            action="requeue",
            outcome="requeued",
            actor=Actor(f"u{i}", "console"),
        )


def _count(client, url: str, **headers) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url, **headers)
    assert response.status_code == 200, url
    return len(ctx.captured_queries)


PAGES = [
    ("receipts:overview", {}),
    ("receipts:list", {}),
    ("receipts:list", hx("receipt-table")),
    ("receipts:audit", {}),
    ("receipts:plans", {}),
    ("sessions:list", {}),
]


@pytest.mark.parametrize("name,headers", PAGES)
def test_list_pages_have_a_fixed_query_count(
    operator_client, django_assert_num_queries, name, headers
):
    url = reverse(name) + "?limit=100"
    _seed(3)
    create_requeue_plan(
        filters={"status": "repair_abandoned"}, receipt_ids=None, actor=Actor("otto", "console")
    )
    small = _count(operator_client, url, **headers)
    _seed(60)
    for _ in range(5):
        create_requeue_plan(
            filters={"status": "checkpoint_failed"},
            receipt_ids=None,
            actor=Actor("otto", "console"),
        )
    with django_assert_num_queries(small):
        operator_client.get(url, **headers)


def test_session_detail_has_a_fixed_query_count(viewer_client, django_assert_num_queries):
    from sessions_app.services import append_message

    session = make_session("agent:main:webchat:qc", messages=2)
    url = reverse("sessions:detail", args=[session.session_key])
    small = _count(viewer_client, url)
    for i in range(50):
        append_message(session.session_key, role="user", content=f"more {i}")
    with django_assert_num_queries(small):
        viewer_client.get(url)


# --- the budget: no console page runs more than 8 queries -------------------------------

MAX_QUERIES = 8


def _every_page(operator_client) -> list[tuple[str, dict]]:
    """Every GET page of the console, with data on it (rows, failures, events, a plan)."""
    from receipts_app.models import MemoryDurableReceipt, RequeuePlan

    _seed(12)
    make_receipt(session_key="agent:ops:cron:q", scope="repair", status="repair_pending")
    plan = create_requeue_plan(
        filters={"status": "checkpoint_failed"}, receipt_ids=None, actor=Actor("otto", "console")
    )
    assert RequeuePlan.objects.filter(pk=plan.plan_id).exists()
    receipt = MemoryDurableReceipt.objects.filter(status="checkpoint_failed").first()
    session_key = receipt.session_key
    since = operator_client.get(reverse("receipts:list")).context["newest_marker"]
    return [
        (reverse("receipts:overview"), {}),
        (reverse("receipts:overview") + "?range=7d", hx("overview-body")),
        (reverse("operations:time_at_risk"), {}),
        (reverse("receipts:list"), {}),
        (reverse("receipts:list") + "?status=checkpoint_failed", {}),
        (reverse("receipts:list") + "?agent=main&scope=checkpoint", {}),
        (reverse("receipts:list") + "?agent=main&status=repair_abandoned", {}),
        (reverse("receipts:list") + "?reason=error&session_key_prefix=agent:main", {}),
        (reverse("receipts:list") + "?status=checkpoint_failed", hx("receipt-table")),
        (reverse("receipts:new_count") + f"?since={since}", hx("new-banner")),
        (reverse("receipts:detail", args=[receipt.receipt_id]), {}),
        (reverse("receipts:plans"), {}),
        (reverse("receipts:plan_detail", args=[plan.plan_id]), {}),
        (reverse("receipts:plan_progress", args=[plan.plan_id]), hx("plan-progress")),
        (reverse("receipts:audit"), {}),
        (reverse("receipts:audit") + "?actor=u1", {}),
        (reverse("agents:detail", args=["main"]), {}),
        (reverse("operations:gateway_link"), {}),
        (reverse("receipts:session_memory") + f"?key={session_key}", {}),
        (reverse("sessions:list"), {}),
        (reverse("sessions:detail", args=[session_key]), {}),
    ]


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_no_console_page_runs_more_than_eight_queries(request, role):
    client = request.getfixturevalue(
        {"viewer": "viewer_client", "operator": "operator_client", "admin": "admin_client_role"}[
            role
        ]
    )
    over = {}
    for url, headers in _every_page(request.getfixturevalue("operator_client")):
        count = _count(client, url, **headers)
        if count > MAX_QUERIES:
            over[url] = count
    assert over == {}
