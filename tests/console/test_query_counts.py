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
