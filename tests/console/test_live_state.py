"""State pages follow the work (issue 10, item 3), at the HTTP level: the pollers' cheap
"has anything moved?" answers 204 until it has, and a plan follows its rows to their final
outcomes. The browser test (tests/browser/test_live_state.py) runs the same with a worker."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from receipts_app import ledger
from receipts_app.audit import Actor
from receipts_app.models import ReceiptEvent
from receipts_app.requeue import (
    complete_checkpoint_requeue,
    create_requeue_plan,
    run_requeue_plan,
    start_requeue_plan,
)
from tests.factories import make_receipt, make_session

from .conftest import hx

pytestmark = pytest.mark.django_db


def _poll_url(html: str, element_id: str) -> str:
    match = re.search(rf'id="{element_id}"[^>]*?hx-get="([^"]+)"', html, re.S)
    assert match, f"#{element_id} does not poll"
    return match.group(1).replace("&amp;", "&")


def test_receipt_detail_answers_204_until_the_row_moves(viewer_client):
    row = make_receipt(scope="repair", status="repair_pending", attempt_count=1)
    page = viewer_client.get(reverse("receipts:detail", args=[row.receipt_id])).content.decode()
    poll = _poll_url(page, "receipt-detail")
    assert viewer_client.get(poll, **hx("receipt-detail")).status_code == 204

    ledger.update_memory_durable_receipt(row.receipt_id, status="repair_done")  # the worker
    moved = viewer_client.get(poll, **hx("receipt-detail"))
    assert moved.status_code == 200
    body = moved.content.decode()
    assert body.lstrip().startswith('<div id="receipt-detail"') and "repair_done" in body
    # The new fragment carries the new version, so the next poll is quiet again.
    assert (
        viewer_client.get(_poll_url(body, "receipt-detail"), **hx("receipt-detail")).status_code
        == 204
    )


def test_session_panel_answers_204_until_a_checkpoint_lands(viewer_client, workspace):
    session = make_session("agent:main:webchat:live", messages=2)
    url = reverse("receipts:session_memory") + f"?key={session.session_key}"
    panel = viewer_client.get(url, **hx("session-memory")).content.decode()
    assert "Not covered" in panel
    poll = _poll_url(panel, "session-memory")
    assert viewer_client.get(poll, **hx("session-memory")).status_code == 204

    from receipts_app.services import take_checkpoint

    take_checkpoint(session_key=session.session_key)  # what the worker runs
    moved = viewer_client.get(poll, **hx("session-memory"))
    assert moved.status_code == 200 and "Covered." in moved.content.decode()


@pytest.fixture
def two_failed_checkpoints(workspace):
    rows = []
    for i in range(2):
        session = make_session(f"agent:main:webchat:plan{i}", messages=2)
        rows.append(
            make_receipt(
                session_key=session.session_key,
                session_id=session.session_id,
                status="checkpoint_failed",
                reason="disk full",
            )
        )
    return rows


def test_plan_follows_its_rows_to_final_outcomes(operator_client, two_failed_checkpoints, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False  # the worker's part is played below, by hand
    recovered, failed = two_failed_checkpoints
    actor = Actor("otto", "console")
    plan = create_requeue_plan(
        filters={"status": "checkpoint_failed"}, receipt_ids=None, actor=actor
    )
    start_requeue_plan(plan_id=plan.plan_id, actor=actor)
    run_requeue_plan(plan.plan_id)
    progress_url = reverse("receipts:plan_progress", args=[plan.plan_id])

    body = operator_client.get(progress_url).content.decode()
    assert 'data-count="pending">2<' in body
    assert "every 3s" in body  # done, but still following the work on the workers

    saved = make_receipt(
        session_key=recovered.session_key,
        session_id=recovered.session_id,
        status="checkpoint_saved",
    )
    complete_checkpoint_requeue(requeued_receipt_id=recovered.receipt_id, saved=saved, error=None)
    complete_checkpoint_requeue(
        requeued_receipt_id=failed.receipt_id, saved=None, error=OSError("disk still full")
    )

    body = operator_client.get(progress_url).content.decode()
    assert 'data-count="recovered">1<' in body
    assert 'data-count="failed">1<' in body
    assert 'data-count="pending">0<' in body
    assert "every 3s" not in body and "every 1s" not in body  # settled: polling stops
    # The workers' completions carry the plan id, so the audit log lists them under the plan.
    completions = ReceiptEvent.objects.filter(action="requeue_complete", plan_id=plan.plan_id)
    assert sorted(completions.values_list("outcome", flat=True)) == ["failed", "recovered"]
    audit = operator_client.get(
        reverse("receipts:audit") + f"?plan_id={plan.plan_id}&action=requeue_complete"
    ).content.decode()
    assert audit.count("requeue_complete</a>") == 2


def test_a_single_requeue_completion_carries_no_plan(two_failed_checkpoints):
    from receipts_app.requeue import requeue_receipt

    row = two_failed_checkpoints[0]
    requeue_receipt(receipt_id=row.receipt_id, actor=Actor("otto", "console"))
    complete_checkpoint_requeue(requeued_receipt_id=row.receipt_id, saved=None, error=OSError("x"))
    event = ReceiptEvent.objects.get(receipt_id=row.receipt_id, action="requeue_complete")
    assert event.plan_id is None
