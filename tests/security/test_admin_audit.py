"""The admin cannot change the ledger behind the audit log.

Receipts change only through the admin actions (which call the requeue services and leave an
event); their change form is read-only and they cannot be added or deleted. Transcript
entries cannot be added or changed. A token keeps its user and scope.
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from opensquilla_site.models import ApiToken
from opensquilla_site.tokens import create_api_token
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent
from sessions_app.models import TranscriptEntry
from tests.factories import make_receipt, make_session, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_web() -> Client:
    make_user("ada", "admin")
    web = Client()
    web.login(username="ada", password="pw-Secret-123")
    return web


def _receipt_url(name: str, row) -> str:
    return reverse(f"admin:receipts_app_memorydurablereceipt_{name}", args=[row.pk])


def test_the_receipt_change_form_edits_nothing(admin_web):
    row = make_receipt(status="checkpoint_failed")
    page = admin_web.get(_receipt_url("change", row))
    assert page.status_code == 200
    body = page.content.decode()
    for field in ("status", "updated_at", "reason", "attempt_count", "session_key"):
        assert f'name="{field}"' not in body, field
    posted = admin_web.post(
        _receipt_url("change", row), {"status": "checkpoint_saved", "updated_at": 1}
    )
    assert posted.status_code == 403
    row.refresh_from_db()
    assert row.status == "checkpoint_failed"


def test_receipts_cannot_be_deleted_or_added_in_the_admin(admin_web):
    row = make_receipt(status="checkpoint_failed")
    assert admin_web.post(_receipt_url("delete", row), {"post": "yes"}).status_code == 403
    changelist = reverse("admin:receipts_app_memorydurablereceipt_changelist")
    bulk = admin_web.post(
        changelist, {"action": "delete_selected", "_selected_action": [row.pk], "post": "yes"}
    )
    assert bulk.status_code in (200, 302)
    assert MemoryDurableReceipt.objects.filter(pk=row.pk).exists()
    add = admin_web.post(
        reverse("admin:receipts_app_memorydurablereceipt_add"),
        {"session_key": "k", "status": "checkpoint_saved"},
    )
    assert add.status_code == 403
    assert MemoryDurableReceipt.objects.count() == 1


def test_a_receipt_changes_in_the_admin_only_through_an_action_that_leaves_an_event(admin_web):
    row = make_receipt(scope="repair", status="repair_failed")
    admin_web.post(
        reverse("admin:receipts_app_memorydurablereceipt_changelist"),
        {"action": "requeue_selected", "_selected_action": [row.pk]},
    )
    row.refresh_from_db()
    assert row.status == "repair_pending"
    event = ReceiptEvent.objects.get(receipt_id=row.receipt_id, action="requeue")
    assert (event.actor, event.surface) == ("ada", "admin")


def test_transcript_entries_cannot_be_added_or_changed(admin_web):
    session = make_session("agent:main:webchat:admin-t", messages=1)
    entry = TranscriptEntry.objects.get(session_key=session.session_key)
    change = reverse("admin:sessions_app_transcriptentry_change", args=[entry.pk])
    body = admin_web.get(change).content.decode()
    assert 'name="content"' not in body and 'name="role"' not in body
    assert admin_web.post(change, {"role": "system", "content": '"forged"'}).status_code == 403
    add = reverse("admin:sessions_app_transcriptentry_add")
    assert admin_web.post(add, {"role": "user"}).status_code == 403
    entry.refresh_from_db()
    assert entry.role != "system"
    assert TranscriptEntry.objects.count() == 1


def test_a_token_keeps_its_user_and_scope(admin_web):
    owner = make_user("bot", "viewer")
    other = make_user("boss", "admin")
    token, _ = create_api_token(user=owner, name="ci", scope="read")
    url = reverse("admin:opensquilla_site_apitoken_change", args=[token.pk])
    body = admin_web.get(url).content.decode()
    assert 'name="user"' not in body and 'name="scope"' not in body
    admin_web.post(url, {"name": "renamed", "user": other.pk, "scope": "admin"})
    token.refresh_from_db()
    assert (token.user_id, token.scope) == (owner.pk, "read")


def test_the_admin_revokes_tokens_through_the_service(admin_web):
    token, _ = create_api_token(user=make_user("bot", "viewer"), name="ci", scope="read")
    admin_web.post(
        reverse("admin:opensquilla_site_apitoken_changelist"),
        {"action": "revoke", "_selected_action": [token.pk]},
    )
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
