"""Django admin: every model registered, read-only where immutable, actions via the services."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.contrib.admin import helpers
from django.test import Client
from django.urls import reverse

from opensquilla_site.models import ApiToken, IdempotentRequest
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent, RequeuePlan
from sessions_app.models import Session, TranscriptEntry
from tests.factories import make_receipt, make_user

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
