"""Django admin: every model registered, read-only where immutable, actions via the services."""

from __future__ import annotations

import re

import pytest
from django.contrib import admin
from django.contrib.admin import helpers
from django.test import Client
from django.urls import reverse

from opensquilla_site.models import ApiToken, IdempotentRequest
from opensquilla_site.timeutil import ms_text
from operations_app.models import (
    AlertDelivery,
    AlertDeliveryAttempt,
    AlertIncident,
    AlertRule,
    Heartbeat,
    OpsCounter,
    TaskStat,
)
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent, RequeuePlan
from sessions_app.models import Session, TranscriptEntry
from tests.factories import make_receipt, make_session, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_web(db) -> Client:
    make_user("ada", "admin")
    client = Client()
    client.login(username="ada", password="pw-Secret-123")
    return client


@pytest.fixture
def staff_viewer(db) -> Client:
    user = make_user("stan", "viewer")
    user.is_staff = True
    user.save()
    client = Client()
    client.login(username="stan", password="pw-Secret-123")
    return client


MODELS = [
    MemoryDurableReceipt,
    ReceiptEvent,
    RequeuePlan,
    Session,
    TranscriptEntry,
    ApiToken,
    IdempotentRequest,
]


def test_every_model_is_registered_with_filters_and_search():
    for model in MODELS:
        model_admin = admin.site._registry[model]
        assert model_admin.list_filter, model
        assert model_admin.search_fields, model


def test_changelists_render_with_a_fixed_query_count(admin_web, django_assert_num_queries):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    user = make_user("tok", None)
    for i in range(3):
        make_receipt(status="checkpoint_failed")
        ApiToken.objects.create(name=f"t{i}", user=user, prefix=f"p{i}", digest=f"{i:064d}")
    counts = {}
    for model in MODELS:
        url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        with CaptureQueriesContext(connection) as ctx:
            assert admin_web.get(url).status_code == 200, url
        counts[url] = len(ctx.captured_queries)
    for i in range(30):
        make_receipt(status="repair_abandoned", scope="repair")
        ApiToken.objects.create(
            name=f"u{i}", user=make_user(f"tok{i}", None), prefix=f"q{i}", digest=f"{i + 100:064d}"
        )
    for url, n in counts.items():
        with django_assert_num_queries(n):
            admin_web.get(url)


def test_immutable_receipt_fields_are_read_only(admin_web):
    row = make_receipt(status="checkpoint_failed")
    url = reverse("admin:receipts_app_memorydurablereceipt_change", args=[row.pk])
    body = admin_web.get(url).content.decode()
    assert row.receipt_id in body  # shown, read-only: the status changes through actions
    for field in ("receipt_id", "idempotency_key", "created_at", "status"):
        assert f'name="{field}"' not in body, field


def test_receipt_events_cannot_be_added_changed_or_deleted(admin_web):
    make_receipt(status="checkpoint_failed")
    event = ReceiptEvent.objects.create(receipt_id="r", action="requeue")
    model_admin = admin.site._registry[ReceiptEvent]
    request = None  # these checks refuse whoever asks
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_delete_permission(request, event)
    assert not model_admin.has_change_permission(request, event)
    assert (
        admin_web.post(
            reverse("admin:receipts_app_receiptevent_delete", args=[event.pk]), {"post": "yes"}
        ).status_code
        == 403
    )
    assert ReceiptEvent.objects.filter(pk=event.pk).exists()


def test_api_token_digest_is_never_shown_or_editable(admin_web):
    token = ApiToken.objects.create(
        name="ci", user=make_user("bot", None), prefix="osq_ab", digest="d" * 64
    )
    body = admin_web.get(
        reverse("admin:opensquilla_site_apitoken_change", args=[token.pk])
    ).content.decode()
    assert "d" * 64 not in body and 'name="digest"' not in body
    assert "osq_ab" in body


def test_admin_requeue_action_uses_the_service_with_surface_admin(admin_web):
    rows = [make_receipt(scope="repair", status="repair_abandoned") for _ in range(2)]
    response = admin_web.post(
        reverse("admin:receipts_app_memorydurablereceipt_changelist"),
        {"action": "requeue_selected", helpers.ACTION_CHECKBOX_NAME: [r.pk for r in rows]},
        follow=True,
    )
    assert "2 requeued" in response.content.decode()
    for row in rows:
        row.refresh_from_db()
        assert row.status == "repair_pending"
        event = ReceiptEvent.objects.get(receipt_id=row.receipt_id, action="requeue")
        assert (event.actor, event.surface) == ("ada", "admin")


def test_admin_acknowledge_asks_for_a_reason_first(admin_web):
    row = make_receipt(scope="repair", status="repair_abandoned")
    url = reverse("admin:receipts_app_memorydurablereceipt_changelist")
    first = admin_web.post(
        url, {"action": "acknowledge_selected", helpers.ACTION_CHECKBOX_NAME: [row.pk]}
    )
    assert first.status_code == 200 and 'name="reason"' in first.content.decode()
    row.refresh_from_db()
    assert row.status == "repair_abandoned"
    blank = admin_web.post(
        url,
        {
            "action": "acknowledge_selected",
            "apply": "1",
            "reason": " ",
            helpers.ACTION_CHECKBOX_NAME: [row.pk],
        },
    )
    assert "needs a written reason" in blank.content.decode()
    done = admin_web.post(
        url,
        {
            "action": "acknowledge_selected",
            "apply": "1",
            "reason": "lost disk",
            helpers.ACTION_CHECKBOX_NAME: [row.pk],
        },
        follow=True,
    )
    assert "1 acknowledged" in done.content.decode()
    row.refresh_from_db()
    assert row.status == "acknowledged"
    event = ReceiptEvent.objects.get(receipt_id=row.receipt_id, action="acknowledge")
    assert (event.surface, event.reason) == ("admin", "lost disk")


def test_staff_viewer_cannot_run_admin_actions(staff_viewer):
    row = make_receipt(scope="repair", status="repair_abandoned")
    url = reverse("admin:receipts_app_memorydurablereceipt_changelist")
    page = staff_viewer.get(url)
    assert page.status_code == 200
    assert "requeue_selected" not in page.content.decode()
    staff_viewer.post(url, {"action": "requeue_selected", helpers.ACTION_CHECKBOX_NAME: [row.pk]})
    row.refresh_from_db()
    assert row.status == "repair_abandoned"
    assert not ReceiptEvent.objects.filter(action="requeue").exists()


# --- sessions: read-only, no add, delete through the service ----------------------------------


def _session_with_ledger(key: str) -> tuple[Session, MemoryDurableReceipt]:
    session = make_session(key, messages=2)
    receipt = make_receipt(
        session_key=session.session_key, session_id=session.session_id, status="checkpoint_failed"
    )
    return session, receipt


def test_session_admin_edits_nothing_and_adds_nothing(admin_web):
    session, _receipt = _session_with_ledger("agent:main:webchat:edit")
    change = reverse("admin:sessions_app_session_change", args=[session.pk])
    body = admin_web.get(change).content.decode()
    assert session.session_key in body
    for field in ("status", "session_key", "session_id", "epoch", "agent_id", "updated_at"):
        assert f'name="{field}"' not in body, field
    # Times are dates, not raw epoch milliseconds.
    assert ms_text(session.updated_at) in body and str(session.updated_at) not in body
    refused = admin_web.post(change, {"status": "walk-edited", "_save": "Save"})
    assert refused.status_code == 403
    assert Session.objects.get(pk=session.pk).status == "active"
    assert admin_web.get(reverse("admin:sessions_app_session_add")).status_code == 403
    listing = admin_web.get(reverse("admin:sessions_app_session_changelist")).content.decode()
    assert "Add session" not in listing


def test_admin_delete_cascades_and_audits_like_the_api(admin_web):
    session, receipt = _session_with_ledger("agent:main:webchat:gone")
    kept, kept_receipt = _session_with_ledger("agent:main:webchat:kept")
    url = reverse("admin:sessions_app_session_delete", args=[session.pk])
    confirm = admin_web.get(url).content.decode()
    assert "Every receipt of the session key" in confirm and "Transcript entries: 2" in confirm
    assert admin_web.post(url, {"post": "yes"}, follow=True).status_code == 200

    assert not Session.objects.filter(session_key=session.session_key).exists()
    assert not TranscriptEntry.objects.filter(session_key=session.session_key).exists()
    assert not MemoryDurableReceipt.objects.filter(session_key=session.session_key).exists()
    events = ReceiptEvent.objects.filter(session_key=session.session_key)
    assert {(e.action, e.receipt_id, e.from_status) for e in events} == {
        ("purged", receipt.receipt_id, "checkpoint_failed"),
        ("session_deleted", "", None),
    }
    assert {(e.actor, e.surface) for e in events} == {("ada", "admin")}
    # The other session and its ledger are untouched.
    assert MemoryDurableReceipt.objects.filter(pk=kept_receipt.pk).exists()
    assert TranscriptEntry.objects.filter(session_key=kept.session_key).count() == 2


def test_admin_bulk_delete_runs_the_service_for_each_session(admin_web):
    pairs = [_session_with_ledger(f"agent:main:webchat:bulk{i}") for i in range(2)]
    url = reverse("admin:sessions_app_session_changelist")
    picked = {helpers.ACTION_CHECKBOX_NAME: [s.pk for s, _r in pairs]}
    confirm = admin_web.post(url, {"action": "delete_selected", **picked})
    assert "Every receipt of the session key" in confirm.content.decode()
    admin_web.post(url, {"action": "delete_selected", "post": "yes", **picked}, follow=True)
    for session, receipt in pairs:
        assert not Session.objects.filter(pk=session.pk).exists()
        assert not MemoryDurableReceipt.objects.filter(pk=receipt.pk).exists()
        deleted = ReceiptEvent.objects.get(
            session_key=session.session_key, action="session_deleted"
        )
        assert (deleted.actor, deleted.surface, deleted.details) == (
            "ada",
            "admin",
            {"receipts_purged": 1},
        )
        assert not TranscriptEntry.objects.filter(session_key=session.session_key).exists()


def test_staff_without_the_delete_permission_cannot_delete_a_session(staff_viewer):
    session, receipt = _session_with_ledger("agent:main:webchat:stay")
    url = reverse("admin:sessions_app_session_delete", args=[session.pk])
    assert staff_viewer.post(url, {"post": "yes"}).status_code == 403
    assert Session.objects.filter(pk=session.pk).exists()
    assert MemoryDurableReceipt.objects.filter(pk=receipt.pk).exists()


READ_ONLY_RECORDS = [RequeuePlan, AlertDelivery, AlertIncident, Heartbeat, OpsCounter, TaskStat]


def test_records_the_system_writes_cannot_be_deleted_in_the_admin(admin_web):
    rule = AlertRule.objects.create(
        name="r",
        condition=AlertRule.FAILURE_STATUS,
        threshold=1,
        channel=AlertRule.EMAIL,
        target="a@b.c",
    )
    rows = {
        RequeuePlan: RequeuePlan.objects.create(created_by="x", surface="console"),
        AlertDelivery: AlertDelivery.objects.create(rule=rule, kind="test", payload={}),
        AlertIncident: AlertIncident.objects.create(rule=rule, subject="main"),
        Heartbeat: Heartbeat.objects.create(kind="worker", name="w1"),
        OpsCounter: OpsCounter.objects.create(name="requeues", label=""),
        TaskStat: TaskStat.objects.create(task="t"),
    }
    for model in READ_ONLY_RECORDS:
        row = rows[model]
        info = (model._meta.app_label, model._meta.model_name)
        url = reverse("admin:{}_{}_delete".format(*info), args=[row.pk])
        assert admin_web.post(url, {"post": "yes"}).status_code == 403, model
        listing = admin_web.get(reverse("admin:{}_{}_changelist".format(*info))).content.decode()
        assert "delete_selected" not in listing, model
        assert model.objects.filter(pk=row.pk).exists(), model


def test_every_model_has_an_english_plural():
    from django.apps import apps

    for model in apps.get_models():
        if model._meta.app_label not in ("receipts_app", "sessions_app", "operations_app"):
            continue
        plural = str(model._meta.verbose_name_plural)
        assert not re.search(r"([^aeiou]ys|xs|ss|chs|shs)$", plural), (model, plural)


def test_admin_lists_show_times_as_dates(admin_web):
    row = make_receipt(status="checkpoint_failed")
    session = make_session("agent:main:webchat:dates", messages=1)
    entry = TranscriptEntry.objects.get(session_key=session.session_key)
    for url, ms in (
        (reverse("admin:receipts_app_memorydurablereceipt_changelist"), row.created_at),
        (reverse("admin:sessions_app_session_changelist"), session.updated_at),
        (reverse("admin:sessions_app_transcriptentry_changelist"), entry.created_at),
    ):
        body = admin_web.get(url).content.decode()
        assert ms_text(ms) in body and str(ms) not in body, url
    detail = admin_web.get(
        reverse("admin:receipts_app_memorydurablereceipt_change", args=[row.pk])
    ).content.decode()
    assert ms_text(row.created_at) in detail and str(row.created_at) not in detail
    rule = AlertRule.objects.create(
        name="r", condition=AlertRule.FAILURE_STATUS, threshold=1, channel=AlertRule.EMAIL
    )
    delivery = AlertDelivery.objects.create(rule=rule, kind="test", payload={})
    tried = AlertDeliveryAttempt.objects.create(delivery=delivery, number=1)
    page = admin_web.get(
        reverse("admin:operations_app_alertdelivery_change", args=[delivery.pk])
    ).content.decode()
    assert ms_text(tried.attempted_at) in page and ms_text(delivery.created_at) in page
    assert str(tried.attempted_at) not in page


def test_admin_delete_removes_the_session_of_its_own_gateway(admin_web):
    """A session key is unique only within a gateway: deleting ``edge``'s session from the
    admin leaves ``local``'s session of the same key, and its ledger, in place."""
    from sessions_app.gateways import ensure_gateway, using_gateway

    key = "agent:main:webchat:shared"
    ensure_gateway("edge")
    local, local_receipt = _session_with_ledger(key)
    with using_gateway("edge"):
        edge, edge_receipt = _session_with_ledger(key)
    url = reverse("admin:sessions_app_session_delete", args=[edge.pk])
    assert "Transcript entries: 2" in admin_web.get(url).content.decode()
    admin_web.post(url, {"post": "yes"}, follow=True)

    assert not Session.objects.filter(pk=edge.pk).exists()
    assert not MemoryDurableReceipt.objects.filter(pk=edge_receipt.pk).exists()
    assert not TranscriptEntry.objects.filter(gateway_id="edge").exists()
    assert Session.objects.filter(pk=local.pk).exists()
    assert MemoryDurableReceipt.objects.filter(pk=local_receipt.pk).exists()
    assert TranscriptEntry.objects.filter(gateway_id="local", session_key=key).count() == 2
