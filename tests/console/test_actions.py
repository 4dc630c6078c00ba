"""Console actions call the requeue services and update the page in place."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse
from django.utils.html import escape

from receipts_app.models import MemoryDurableReceipt, ReceiptEvent, RequeuePlan
from tests.factories import make_receipt, make_session

from .conftest import hx

pytestmark = pytest.mark.django_db


@pytest.fixture
def live_failed():
    session = make_session("agent:main:webchat:act", messages=2)
    return make_receipt(
        session_key=session.session_key,
        session_id=session.session_id,
        status="checkpoint_failed",
        reason="disk full",
    )


def _abandoned(**extra):
    fields = {
        "scope": "repair",
        "status": "repair_abandoned",
        "reason": "llm_error",
        "attempt_count": 4,
    }
    fields.update(extra)
    return make_receipt(**fields)


def test_requeue_from_detail_swaps_the_detail_and_signals_other_regions(
    operator_client, live_failed, settings
):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    rid = live_failed.receipt_id
    response = operator_client.post(
        reverse("receipts:requeue", args=[rid]),
        {"expected_status": "checkpoint_failed", "expected_updated_at": live_failed.updated_at},
        **hx(f"receipt-{rid}"),
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith(f'<div id="receipt-{rid}"')
    # The outcome is the action's own message (the timeline says "requeued" too).
    flash = response.context["flash"]
    assert flash.startswith("requeued: ") and response.context["flash_ok"]
    assert escape(flash) in body
    assert json.loads(response["HX-Trigger"])["receipts-changed"]["receipt_id"] == rid
    assert MemoryDurableReceipt.objects.get(receipt_id=rid).status == "checkpoint_requeued"
    event = ReceiptEvent.objects.get(receipt_id=rid, action="requeue")
    assert (event.actor, event.surface, event.outcome) == ("otto", "console", "requeued")


def test_requeue_from_a_row_returns_the_row(operator_client):
    row = _abandoned()
    rid = row.receipt_id
    response = operator_client.post(reverse("receipts:requeue", args=[rid]), **hx(f"row-{rid}"))
    body = response.content.decode()
    assert body.lstrip().startswith(f'<tr id="row-{rid}"')
    assert "repair_pending" in body
    assert MemoryDurableReceipt.objects.get(receipt_id=rid).attempt_count == 0


def test_plain_post_redirects_to_the_detail_with_a_message(operator_client):
    row = _abandoned()
    response = operator_client.post(reverse("receipts:requeue", args=[row.receipt_id]), follow=True)
    assert response.redirect_chain[-1][0] == reverse("receipts:detail", args=[row.receipt_id])
    shown = [str(m) for m in response.context["messages"]]
    assert len(shown) == 1 and shown[0].startswith("requeued: ")
    assert escape(shown[0]) in response.content.decode()


def test_second_click_with_a_stale_view_queues_nothing(operator_client):
    row = _abandoned()
    seen = {"expected_status": row.status, "expected_updated_at": row.updated_at}
    url = reverse("receipts:requeue", args=[row.receipt_id])
    operator_client.post(url, seen, **hx(f"receipt-{row.receipt_id}"))
    second = operator_client.post(url, seen, **hx(f"receipt-{row.receipt_id}")).content.decode()
    assert "stale" in second
    outcomes = list(
        ReceiptEvent.objects.filter(receipt_id=row.receipt_id, action="requeue").values_list(
            "outcome", flat=True
        )
    )
    assert outcomes == ["requeued", "stale"]


def test_detail_explains_why_requeue_is_not_allowed(operator_client):
    fenced = make_receipt(
        status="checkpoint_failed", session_key="agent:main:webchat:gone", session_id="old"
    )
    body = operator_client.get(
        reverse("receipts:detail", args=[fenced.receipt_id])
    ).content.decode()
    assert "Not available:" in body and "fenced" in body.lower()
    running = make_receipt(scope="repair", status="repair_running")
    body = operator_client.get(
        reverse("receipts:detail", args=[running.receipt_id])
    ).content.decode()
    assert "Not available:" in body


def test_acknowledge_needs_a_reason(operator_client):
    row = _abandoned()
    url = reverse("receipts:acknowledge", args=[row.receipt_id])
    response = operator_client.post(url, {"reason": "   "}, **hx(f"receipt-{row.receipt_id}"))
    assert response.status_code == 400
    assert "reason" in response.content.decode()
    assert MemoryDurableReceipt.objects.get(pk=row.pk).status == "repair_abandoned"


def test_acknowledge_with_a_reason_is_recorded(operator_client):
    row = _abandoned()
    response = operator_client.post(
        reverse("receipts:acknowledge", args=[row.receipt_id]),
        {"reason": "archive deleted upstream", "expected_status": "repair_abandoned"},
        **hx(f"receipt-{row.receipt_id}"),
    )
    assert response.status_code == 200
    assert "acknowledged" in response.content.decode()
    assert MemoryDurableReceipt.objects.get(pk=row.pk).status == "acknowledged"
    event = ReceiptEvent.objects.get(receipt_id=row.receipt_id, action="acknowledge")
    assert event.reason == "archive deleted upstream" and event.surface == "console"


def test_bulk_plan_from_a_selection_then_execute(
    operator_client, settings, django_capture_on_commit_callbacks
):
    settings.CELERY_TASK_ALWAYS_EAGER = True
    rows = [_abandoned() for _ in range(3)]
    keep = _abandoned()
    response = operator_client.post(
        reverse("receipts:plan_create"),
        {"selected": [r.receipt_id for r in rows], "reason": "disk replaced"},
    )
    plan = RequeuePlan.objects.get()
    assert response["Location"] == reverse("receipts:plan_detail", args=[plan.plan_id])
    assert plan.total == 3 and plan.dry_run_counts == {"requeued": 3}
    with django_capture_on_commit_callbacks(execute=True):
        response = operator_client.post(
            reverse("receipts:plan_execute", args=[plan.plan_id]),
            **hx(f"plan-progress-{plan.plan_id}"),
        )
    assert response.status_code == 200
    assert (
        response.content.decode().lstrip().startswith(f'<section id="plan-progress-{plan.plan_id}"')
    )
    plan.refresh_from_db()
    assert plan.state == "done" and plan.processed == 3
    assert set(
        MemoryDurableReceipt.objects.filter(pk__in=[r.pk for r in rows]).values_list(
            "status", flat=True
        )
    ) <= {
        "repair_pending",
        "repair_running",
        "repair_done",
        "repair_failed",
    }
    assert MemoryDurableReceipt.objects.get(pk=keep.pk).status == "repair_abandoned"
    progress = operator_client.get(
        reverse("receipts:plan_progress", args=[plan.plan_id])
    ).content.decode()
    assert "3 of 3 processed" in progress and "every 1s" not in progress


def test_bulk_plan_from_all_matching_freezes_the_filter(operator_client):
    for _ in range(3):
        _abandoned(session_key="agent:main:webchat:grp")
    _abandoned(session_key="agent:ops:webchat:other")
    operator_client.post(
        reverse("receipts:plan_create"),
        {"status": "repair_abandoned", "session_key_prefix": "agent:main:", "all_matching": "1"},
    )
    plan = RequeuePlan.objects.get()
    assert plan.total == 3
    assert plan.filters["session_key_prefix"] == "agent:main:"
    assert plan.receipt_ids == []


def test_queued_plan_progress_keeps_polling(operator_client):
    _abandoned()
    operator_client.post(
        reverse("receipts:plan_create"), {"status": "repair_abandoned", "all_matching": "1"}
    )
    plan = RequeuePlan.objects.get()
    RequeuePlan.objects.filter(pk=plan.pk).update(state="running", processed=0)
    body = operator_client.get(
        reverse("receipts:plan_progress", args=[plan.plan_id])
    ).content.decode()
    assert "every 1s" in body and "<progress" in body


def test_plan_without_selection_is_a_friendly_error(operator_client):
    response = operator_client.post(reverse("receipts:plan_create"), {"status": "repair_abandoned"})
    assert response.status_code == 400
    assert "Select at least one receipt" in response.content.decode()
    assert not RequeuePlan.objects.exists()


def test_checkpoint_now_and_flush_now_enqueue_and_audit(
    operator_client, workspace, settings, django_capture_on_commit_callbacks
):
    settings.CELERY_TASK_ALWAYS_EAGER = True
    session = make_session("agent:main:webchat:now", messages=2)
    with django_capture_on_commit_callbacks(execute=True):
        response = operator_client.post(
            reverse("receipts:session_checkpoint"),
            {"key": session.session_key},
            **hx("session-memory"),
        )
    assert response.status_code == 200 and "checkpoint queued" in response.content.decode()
    assert MemoryDurableReceipt.objects.filter(
        session_key=session.session_key, status="checkpoint_saved"
    ).exists()
    assert ReceiptEvent.objects.filter(
        session_key=session.session_key, action="checkpoint_now", actor="otto"
    ).exists()
    settings.CELERY_TASK_ALWAYS_EAGER = False
    response = operator_client.post(
        reverse("receipts:session_flush"), {"key": session.session_key}, follow=True
    )
    assert "flush queued" in response.content.decode()
    assert ReceiptEvent.objects.filter(session_key=session.session_key, action="flush_now").exists()


def test_checkpoint_now_on_an_empty_session_says_why(operator_client):
    session = make_session("agent:main:webchat:empty")
    body = operator_client.post(
        reverse("receipts:session_checkpoint"), {"key": session.session_key}, **hx("session-memory")
    ).content.decode()
    assert "cannot be empty" in body
