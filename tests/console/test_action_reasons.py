"""Every console action takes an optional reason, shown in the timeline and the audit log
(issue 10, item 2). Each test posts the form the page offers, with the reason typed in."""

from __future__ import annotations

import pytest
from django.urls import reverse

from receipts_app.models import ReceiptEvent
from tests.factories import make_receipt, make_session

from .html_forms import forms_posting_to

pytestmark = pytest.mark.django_db


def _live_failed(key: str):
    session = make_session(key, messages=2)
    return make_receipt(
        session_key=session.session_key,
        session_id=session.session_id,
        status="checkpoint_failed",
        reason="disk full",
    )


def _shows_reason_everywhere(client, receipt_id: str, reason: str) -> None:
    event = ReceiptEvent.objects.get(receipt_id=receipt_id, action="requeue")
    assert (event.outcome, event.reason) == ("requeued", reason)
    detail = client.get(reverse("receipts:detail", args=[receipt_id])).content.decode()
    assert f'<div class="event-reason">{reason}</div>' in detail
    audit = client.get(reverse("receipts:audit") + f"?receipt_id={receipt_id}").content.decode()
    assert f'<td class="reason">{reason}</td>' in audit


def test_row_requeue_sends_the_reason(operator_client):
    row = _live_failed("agent:main:webchat:row")
    page = operator_client.get(reverse("receipts:list") + "?status=checkpoint_failed").content
    (form,) = forms_posting_to(page.decode(), reverse("receipts:requeue", args=[row.receipt_id]))
    assert ("reason", "") in form.fields  # the field is there, empty until typed in
    response = operator_client.post(
        form.attrs["action"], form.data(reason="disk replaced"), HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200
    assert 'data-receipt-id="' + row.receipt_id in response.content.decode()
    _shows_reason_everywhere(operator_client, row.receipt_id, "disk replaced")


def test_detail_requeue_sends_the_reason(operator_client):
    row = _live_failed("agent:main:webchat:det")
    url = reverse("receipts:detail", args=[row.receipt_id])
    page = operator_client.get(url).content.decode()
    (form,) = forms_posting_to(page, reverse("receipts:requeue", args=[row.receipt_id]))
    operator_client.post(form.attrs["action"], form.data(reason="volume remounted"))
    _shows_reason_everywhere(operator_client, row.receipt_id, "volume remounted")


def test_requeue_without_a_reason_still_works(operator_client):
    row = _live_failed("agent:main:webchat:none")
    page = operator_client.get(reverse("receipts:detail", args=[row.receipt_id])).content
    (form,) = forms_posting_to(page.decode(), reverse("receipts:requeue", args=[row.receipt_id]))
    operator_client.post(form.attrs["action"], form.data())
    event = ReceiptEvent.objects.get(receipt_id=row.receipt_id, action="requeue")
    assert (event.outcome, event.reason) == ("requeued", None)


def test_plan_note_reaches_every_requeue_event(operator_client, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    rows = [_live_failed(f"agent:main:webchat:p{i}") for i in range(2)]
    page = operator_client.get(reverse("receipts:list") + "?status=checkpoint_failed").content
    (bulk,) = [f for f in forms_posting_to(page.decode(), reverse("receipts:plan_create"))]
    response = operator_client.post(
        bulk.attrs["action"], bulk.data(all_matching="1", note="quota raised")
    )
    plan_url = response["Location"]
    plan_id = plan_url.rstrip("/").rsplit("/", 1)[-1]
    from receipts_app.requeue import run_requeue_plan

    operator_client.post(reverse("receipts:plan_execute", args=[plan_id]))
    run_requeue_plan(plan_id)
    events = ReceiptEvent.objects.filter(action="requeue", plan_id=plan_id)
    assert sorted(e.receipt_id for e in events) == sorted(r.receipt_id for r in rows)
    assert {e.reason for e in events} == {"quota raised"}
    assert "quota raised" in operator_client.get(plan_url).content.decode()
