"""Rows the live mirror brought in say where they came from, and stay, marked, once the
gateway deletes them upstream (issue 11: "mirrored rows gone upstream are marked and shown")."""

from __future__ import annotations

import pytest
from django.urls import reverse

from receipts_app.mirror.models import MirroredReceipt, MirroredSession, MirrorSource
from tests.factories import make_receipt, make_session

pytestmark = pytest.mark.django_db

SOURCE = "/var/lib/opensquilla/state/sessions.db"


def _source() -> MirrorSource:
    return MirrorSource.objects.create(path=SOURCE)


def test_a_receipt_gone_upstream_is_marked_and_kept(viewer_client, operator_client):
    row = make_receipt(status="checkpoint_failed")
    MirroredReceipt.objects.create(
        source=_source(),
        idempotency_key=row.idempotency_key,
        source_updated_at=row.updated_at,
        source_status="checkpoint_failed",
        gone_at=1_790_000_000_000,
    )
    url = reverse("receipts:detail", args=[row.receipt_id])
    body = viewer_client.get(url).content.decode()
    assert 'data-upstream="gone"' in body
    # A viewer reads whose ledger it left, an operator the sessions.db path.
    assert "gone upstream" in body and "Deleted from gateway <code>local</code>'s ledger" in body
    assert SOURCE not in body
    assert SOURCE in operator_client.get(url).content.decode()


def test_a_live_mirrored_receipt_says_when_the_gateway_still_has_an_older_status(viewer_client):
    row = make_receipt(status="acknowledged")
    MirroredReceipt.objects.create(
        source=_source(),
        idempotency_key=row.idempotency_key,
        source_updated_at=row.updated_at - 1,
        source_status="checkpoint_failed",
    )
    body = viewer_client.get(reverse("receipts:detail", args=[row.receipt_id])).content.decode()
    assert 'data-upstream="live"' in body and "gone upstream" not in body
    assert "still says <code>checkpoint_failed</code>" in body


def test_a_receipt_never_mirrored_has_no_mark(viewer_client):
    row = make_receipt()
    body = viewer_client.get(reverse("receipts:detail", args=[row.receipt_id])).content.decode()
    assert "data-upstream" not in body


def test_a_session_gone_upstream_is_marked_on_its_page(viewer_client, operator_client):
    session = make_session(messages=1)
    MirroredSession.objects.create(
        source=_source(), session_key=session.session_key, gone_at=1_790_000_000_000
    )
    url = reverse("sessions:detail", args=[session.session_key])
    body = viewer_client.get(url).content.decode()
    assert 'data-upstream="gone"' in body and SOURCE not in body
    assert 'data-upstream="gone"' in (text := operator_client.get(url).content.decode())
    assert SOURCE in text
