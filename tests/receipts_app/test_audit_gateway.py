"""The audit trail names the gateway of the row each event is about, whatever gateway the
surface acted in, and the audit log and the events API narrow to one gateway."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.test.utils import CaptureQueriesContext

from opensquilla_site.tokens import create_api_token
from receipts_app import ledger
from receipts_app.audit import Actor
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent
from receipts_app.requeue import acknowledge_receipt, requeue_receipt
from sessions_app.gateways import ensure_gateway, using_gateway
from tests.factories import make_receipt, make_session, make_user

from .requeue_support import failed_checkpoint, sent_fixture  # noqa: F401

pytestmark = pytest.mark.django_db
KEY = "agent:main:webchat:default"
ADA = Actor("ada", "api")


@pytest.fixture
def edge_failure():
    """A failed checkpoint in gateway ``edge``, under a key ``local`` also has."""
    ensure_gateway("edge")
    make_session(KEY, messages=1)
    with using_gateway("edge"):
        session = make_session(KEY, messages=2)
        return failed_checkpoint(session)


def _events(receipt: MemoryDurableReceipt) -> list[tuple[str, str]]:
    return list(
        ReceiptEvent.objects.filter(receipt_id=receipt.receipt_id)
        .order_by("id")
        .values_list("action", "gateway_id")
    )


def test_an_action_by_receipt_id_is_recorded_in_the_receipts_gateway(edge_failure, sent):
    # Addressed by id, with no gateway chosen: the surface acts in "local", the row is edge's.
    requeue_receipt(receipt_id=edge_failure.receipt_id, actor=ADA, reason="disk back")
    assert _events(edge_failure) == [("requeue", "edge")]
    repair = None
    with using_gateway("edge"):
        repair = make_receipt(session_key=KEY, scope="repair", status="repair_failed")
    acknowledge_receipt(receipt_id=repair.receipt_id, actor=ADA, reason="accepted")
    assert _events(repair) == [("acknowledge", "edge")]


def test_ledger_status_changes_are_recorded_in_the_rows_gateway(edge_failure):
    # The ledger's own statements (update and upsert) write the event beside the row.
    ledger.update_memory_durable_receipt(edge_failure.receipt_id, status="repair_pending")
    row = MemoryDurableReceipt.objects.get(pk=edge_failure.pk)
    row.status = "checkpoint_failed"
    with using_gateway("edge"):
        ledger.upsert_memory_durable_receipt(row)
    assert _events(edge_failure) == [("status_change", "edge"), ("status_change", "edge")]
    local = make_receipt(session_key=KEY, status="checkpoint_failed")
    ledger.update_memory_durable_receipt(local.receipt_id, status="repair_pending")
    assert _events(local) == [("status_change", "local")]


def test_the_audit_log_shows_and_filters_the_gateway(edge_failure, sent):
    local = make_receipt(session_key=KEY, status="repair_failed", scope="repair")
    requeue_receipt(receipt_id=edge_failure.receipt_id, actor=ADA)
    requeue_receipt(receipt_id=local.receipt_id, actor=ADA)
    make_user("ada", "admin")
    admin = Client()
    admin.login(username="ada", password="pw-Secret-123")

    def gateways(page: str) -> list[str]:
        return re.findall(r'<td class="gateway"><a [^>]*><code>([^<]+)</code>', page)

    every = admin.get("/audit/").content.decode()
    assert "<th>Gateway</th>" in every
    assert sorted(gateways(every)) == ["edge", "local"]
    only_edge = admin.get("/audit/?gateway=edge")
    assert only_edge.status_code == 200
    assert gateways(only_edge.content.decode()) == ["edge"]
    assert admin.get("/audit/?gateway=Not%20A%20Slug").status_code == 400


def test_the_events_api_names_the_gateway(edge_failure, sent):
    requeue_receipt(receipt_id=edge_failure.receipt_id, actor=ADA)
    owner = make_user("reader", "viewer")
    _token, plaintext = create_api_token(user=owner, name="audit", scope="read")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {plaintext}"}
    path = f"/api/v1/receipts/{edge_failure.receipt_id}/events"
    items = Client().get(path, **auth).json()["items"]
    assert [(i["action"], i["gateway"]) for i in items] == [("requeue", "edge")]
    assert Client().get(f"{path}?gateway=local", **auth).json()["items"] == []


@pytest.mark.postgres
def test_the_audit_logs_gateway_filter_reads_its_own_index(require_postgres):
    """``?gateway=b`` reads the partial index of other gateways' events, not every newer event
    of every gateway (``local``'s writes pay nothing for that index)."""
    from django.db import connection

    from receipts_app.console.selectors import page_audit_events

    ensure_gateway("b")
    with CaptureQueriesContext(connection) as captured, using_gateway("b"):
        page_audit_events({})
    sql = next(q["sql"] for q in captured.captured_queries if "receiptevent" in q["sql"].lower())
    with connection.cursor() as cur:
        cur.execute("SET LOCAL enable_seqscan = off")
        cur.execute("EXPLAIN " + sql)
        plan = "\n".join(r[0] for r in cur.fetchall())
    assert "idx_event_gateway" in plan, plan
