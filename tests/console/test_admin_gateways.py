"""The admin names the gateway of every gateway-owned row, and filters by it."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.test import Client
from django.urls import reverse

from operations_app.models import AlertIncident, AlertRule
from receipts_app.audit import Actor
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent, RequeuePlan
from receipts_app.requeue import create_requeue_plan
from sessions_app.gateways import ensure_gateway, using_gateway
from sessions_app.models import Session, TranscriptEntry
from tests.factories import make_receipt, make_session, make_user

pytestmark = pytest.mark.django_db

# Every model a gateway owns, or that is scoped to one, with its admin.
GATEWAY_MODELS = [
    MemoryDurableReceipt,
    ReceiptEvent,
    Session,
    TranscriptEntry,
    RequeuePlan,
    AlertRule,
    AlertIncident,
]


@pytest.fixture
def admin_web(db) -> Client:
    make_user("ada", "admin")
    client = Client()
    client.login(username="ada", password="pw-Secret-123")
    return client


def _names(items) -> list[str]:
    out = []
    for item in items:
        name = item if isinstance(item, str) else getattr(item, "parameter_name", "")
        out.append(name)
    return out


def test_every_gateway_model_lists_and_filters_its_gateway():
    for model in GATEWAY_MODELS:
        model_admin = admin.site._registry[model]
        shown = _names(model_admin.list_display)
        filters = _names(model_admin.list_filter)
        assert any("gateway" in n for n in shown), model
        assert any("gateway" in n for n in filters), model


def test_the_event_and_plan_lists_filter_by_gateway(admin_web):
    ensure_gateway("edge")
    key = "agent:main:webchat:default"
    make_session(key, messages=1)
    with using_gateway("edge"):
        make_session(key, messages=1)
    local = make_receipt(session_key=key, status="repair_failed", scope="repair")
    with using_gateway("edge"):
        edge = make_receipt(session_key=key, status="repair_failed", scope="repair")
    for row in (local, edge):
        ReceiptEvent.objects.create(
            receipt_id=row.receipt_id, action="note", gateway_id=row.gateway_id
        )
    url = reverse("admin:receipts_app_receiptevent_changelist")
    page = admin_web.get(f"{url}?gateway_id=edge").content.decode()
    assert edge.receipt_id in page and local.receipt_id not in page

    actor = Actor("ada", "admin")
    everywhere = create_requeue_plan(
        filters={"status": ["repair_failed"]}, receipt_ids=[], actor=actor
    )
    on_edge = create_requeue_plan(
        filters={"status": ["repair_failed"], "gateway": "edge"}, receipt_ids=[], actor=actor
    )
    plans = reverse("admin:receipts_app_requeueplan_changelist")
    page = admin_web.get(f"{plans}?gateway=edge").content.decode()
    assert on_edge.plan_id in page and everywhere.plan_id not in page
    page = admin_web.get(f"{plans}?gateway=-").content.decode()
    assert everywhere.plan_id in page and on_edge.plan_id not in page
