"""Requeue, acknowledge, requeue plans and health over the API."""

from __future__ import annotations

import pytest

from receipts_app.models import MemoryDurableReceipt, ReceiptEvent, RequeuePlan
from tests.api.conftest import assert_error
from tests.factories import make_receipt, make_session

pytestmark = pytest.mark.django_db


def failed_checkpoint():
    session = make_session(messages=2)
    return make_receipt(
        session_key=session.session_key,
        session_id=session.session_id,
        status="checkpoint_failed",
        reason="disk full",
    )


def test_requeue_a_failed_checkpoint(operator):
    row = failed_checkpoint()
    response = operator.post(f"/receipts/{row.receipt_id}/requeue", {"reason": "disk fixed"})
    assert response.status_code == 200
    body = response.json()
    assert body["outcome"] == "requeued" and body["task_id"]
    assert MemoryDurableReceipt.objects.get(pk=row.pk).status == "checkpoint_requeued"
    event = ReceiptEvent.objects.filter(receipt_id=row.receipt_id, outcome="requeued").get()
    assert event.surface == "api" and event.reason == "disk fixed"


def test_requeue_a_terminal_repair_without_a_body(operator):
    row = make_receipt(scope="repair", status="repair_abandoned", attempt_count=4)
    body = operator.post(f"/receipts/{row.receipt_id}/requeue").json()
    assert body["outcome"] == "requeued"
    fresh = MemoryDurableReceipt.objects.get(pk=row.pk)
    assert fresh.status == "repair_pending" and fresh.attempt_count == 0


def test_requeue_a_success_is_not_requeueable(operator):
    row = make_receipt(status="checkpoint_saved")
    body = operator.post(f"/receipts/{row.receipt_id}/requeue").json()
    assert body["outcome"] == "not_requeueable"
    assert MemoryDurableReceipt.objects.get(pk=row.pk).status == "checkpoint_saved"


def test_requeue_compare_and_set_refuses_a_stale_view(operator):
    row = make_receipt(scope="repair", status="repair_failed")
    stale = operator.post(
        f"/receipts/{row.receipt_id}/requeue", {"expected_status": "repair_abandoned"}
    )
    body = assert_error(stale, 409, "stale")
    assert body["outcome"] == "stale"
    assert MemoryDurableReceipt.objects.get(pk=row.pk).status == "repair_failed"
    fresh = operator.post(
        f"/receipts/{row.receipt_id}/requeue",
        {"expected_status": "repair_failed", "expected_updated_at": row.updated_at},
    )
    assert fresh.json()["outcome"] == "requeued"


def test_requeue_unknown_receipt_is_404(operator):
    body = assert_error(operator.post("/receipts/nope/requeue"), 404, "not_found")
    assert body["outcome"] == "not_found"
    assert_error(operator.post("/receipts/x/requeue", {"color": 1}), 422, "validation_error")


def test_acknowledge_needs_a_reason_and_keeps_the_row(operator):
    row = make_receipt(scope="repair", status="repair_abandoned")
    assert_error(
        operator.post(f"/receipts/{row.receipt_id}/acknowledge", {}), 422, "validation_error"
    )
    assert_error(
        operator.post(f"/receipts/{row.receipt_id}/acknowledge", {"reason": "   "}),
        422,
        "validation_error",
    )
    ok = operator.post(f"/receipts/{row.receipt_id}/acknowledge", {"reason": "known loss"})
    assert ok.status_code == 200
    assert ok.json()["outcome"] == "acknowledged" and ok.json()["from_status"] == "repair_abandoned"
    assert MemoryDurableReceipt.objects.get(pk=row.pk).status == "acknowledged"
    assert_error(operator.post("/receipts/nope/acknowledge", {"reason": "x"}), 404, "not_found")


def test_requeue_plan_dry_run_then_execute_once(operator):
    for _ in range(3):
        make_receipt(scope="repair", status="repair_failed")
    make_receipt(status="checkpoint_saved")
    created = operator.post(
        "/requeue-plans", {"filters": {"status": ["repair_failed"]}, "reason": "outage over"}
    )
    assert created.status_code == 201
    plan = created.json()
    assert plan["state"] == "previewed" and plan["total"] == 3
    assert plan["dry_run_counts"] == {"requeued": 3}
    assert plan["created_by"].startswith("operator")
    # The dry run changed nothing.
    assert MemoryDurableReceipt.objects.filter(status="repair_failed").count() == 3

    got = operator.get(f"/requeue-plans/{plan['plan_id']}").json()
    assert got["plan_id"] == plan["plan_id"] and got["processed"] == 0

    executed = operator.post(f"/requeue-plans/{plan['plan_id']}/execute")
    assert executed.status_code == 202 and executed.json()["state"] == "queued"
    again = operator.post(f"/requeue-plans/{plan['plan_id']}/execute")
    assert again.json()["state"] == "queued"
    assert RequeuePlan.objects.get(pk=plan["plan_id"]).state == "queued"


def test_requeue_plan_errors(operator, reader):
    assert_error(operator.post("/requeue-plans", {}), 422, "validation_error")
    assert_error(
        operator.post("/requeue-plans", {"filters": {"colour": "red"}}), 422, "validation_error"
    )
    assert_error(
        operator.post("/requeue-plans", {"filters": {"status": "a\x00"}}), 422, "validation_error"
    )
    assert_error(operator.get("/requeue-plans/nope"), 404, "not_found")
    assert_error(operator.post("/requeue-plans/nope/execute"), 404, "not_found")
    assert_error(reader.post("/requeue-plans", {"filters": {"status": "x"}}), 403, "forbidden")
    assert not RequeuePlan.objects.exists()


def test_health_per_agent(reader):
    make_receipt(session_key="agent:ops:web:1", status="checkpoint_failed")
    make_receipt(session_key="agent:main:web:1", status="checkpoint_saved")
    items = {h["agentId"]: h for h in reader.get("/health").json()["items"]}
    assert items["ops"]["memorySafety"]["status"] == "error"
    assert items["main"]["memorySafety"]["status"] == "ok"
    one = reader.get("/health/OPS").json()
    assert one["agentId"] == "ops" and one["memorySafety"]["errorCount"] == 1
