"""The operator's walk-through of issue 4, in a real browser.

log in → see the failed checkpoint on the overview → filter the list → open it → requeue
it → see it become checkpoint_recovered → bulk-requeue a filtered group through a dry run →
acknowledge an abandoned repair with a reason → find all of it in the audit log.

The requeues run on a REAL Celery worker (``celery worker --pool=solo`` against the test
database), started by the fixtures of ``tests/worker/conftest.py`` (imported, not copied).
The live server is a thread of this process, so its enqueues go through the Celery app that
``celery_queue`` routed to this test's private queue, which only that worker consumes.
"""

# ruff: noqa: F811 - the worker fixtures are imported by name and requested as arguments

from __future__ import annotations

import re

import pytest

from receipts_app.models import MemoryDurableReceipt, ReceiptEvent, RequeuePlan
from sessions_app.services import append_message
from tests.factories import make_receipt, make_session, make_user
from tests.worker.conftest import (  # noqa: F401 - fixtures, used by name
    _broker_reachable,
    celery_queue,
    service_marks,
    shared_workspaces,
    start_worker,
)

from .conftest import log_in

# Transactional: the live server and the worker see committed rows (roles come from the factories).
pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
]

# How long the page may take to show work the worker did (a bound, never an assertion).
WORKER_WAIT_MS = 60_000
XSS = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2; alert(2)">'


def _seed_walkthrough() -> dict:
    make_user("otto", "operator")
    session = make_session("agent:main:webchat:walk", messages=3)
    failed = make_receipt(
        session_key=session.session_key,
        session_id=session.session_id,
        turn_id="turn-walk",
        status="checkpoint_failed",
        reason="[Errno 28] No space left on device: '/srv/ws/memory/.checkpoints/walk/turn-walk.jsonl'",
        attempt_count=1,
        idempotency_key=f"checkpoint:{session.session_key}:turn-walk:abc:failed:01",
    )
    group = [
        make_receipt(
            session_key=f"agent:main:webchat:bulk{i}",
            scope="repair",
            status="repair_abandoned",
            reason="provider_failed_archived",
            attempt_count=4,
        )
        for i in range(12)
    ]
    abandoned = make_receipt(
        session_key="agent:ops:webchat:old",
        scope="repair",
        status="repair_abandoned",
        reason="parse_failed_archived",
        attempt_count=4,
    )
    return {"session": session, "failed": failed, "group": group, "abandoned": abandoned}


def _needs_worker(fn):
    """``worker``, plus ``redis`` when the broker is Redis, as the worker tests are marked."""
    for mark in service_marks():
        fn = mark(fn)
    return fn


@_needs_worker
def test_operator_walkthrough(page, live_server, start_worker, shared_workspaces, screenshot):
    worker = start_worker()
    data = _seed_walkthrough()
    base = live_server.url
    failed = data["failed"]

    # The beat folds new failures into the overview's groups within seconds; do it now.
    from receipts_app.failure_groups import fold_all

    fold_all()

    # 1. Log in.
    log_in(page, base, "otto")

    # 2. The failed checkpoint is on the overview, in its failure group.
    assert page.locator(".failure-group").filter(has_text="No space left on device").count() == 1
    assert page.get_by_text("checkpoint_failed").first.is_visible()
    screenshot(page, "01-overview-failed-checkpoint")

    # 3. Filter the list: the status tab, then a session-key prefix; the URL follows.
    page.click('nav.topbar a:has-text("Receipts"), header nav a:has-text("Receipts")')
    page.wait_for_url(re.compile(r"/receipts/"))
    page.locator("nav.tabs a", has_text="checkpoint_failed").click()
    page.wait_for_url(re.compile(r"status=checkpoint_failed"))
    page.fill('input[name="session_key_prefix"]', "agent:main:webchat:wa")
    page.click('#filter-form button[type="submit"]')
    page.wait_for_url(re.compile(r"session_key_prefix=agent"))
    rows = page.locator("table.receipts tbody tr.receipt-row")
    assert rows.count() == 1
    screenshot(page, "02-receipts-filtered")

    # 4. Open it.
    rows.first.get_by_role("link", name="Open").click()
    page.wait_for_url(re.compile(rf"/receipts/{failed.receipt_id}/"))
    assert page.get_by_text("No space left on device").first.is_visible()
    screenshot(page, "03-receipt-detail-failed")

    # 5. Requeue it, saying why (htmx swaps the detail in place).
    page.fill('#receipt-detail input[name="reason"]', "disk replaced")
    page.click('button[data-action="requeue"]')
    page.wait_for_selector("text=requeued: a new checkpoint")

    # 6. The real worker runs the checkpoint task; the page follows it without a reload.
    page.wait_for_selector(
        "#receipt-detail h1 .status:text-is('checkpoint_recovered')", timeout=WORKER_WAIT_MS
    )
    assert page.locator(".event-reason").filter(has_text="disk replaced").count() == 1
    resolved_by = MemoryDurableReceipt.objects.get(pk=failed.pk).resolved_by_receipt_id
    assert resolved_by and page.locator(f"a[href*='{resolved_by}']").count() >= 1
    screenshot(page, "04-receipt-checkpoint-recovered")
    assert "receipts_app.tasks.checkpoint_session" in worker.log()  # the worker ran it

    # 7. Bulk-requeue a filtered group: select the page, then all N matching, dry run, confirm.
    page.goto(
        f"{base}/receipts/?scope=repair&status=repair_abandoned&session_key_prefix=agent:main:&limit=10"
    )
    page.check('input[data-action="select-page"]')
    page.click('button[data-action="select-all-matching"]')
    assert page.locator("#all-matching-banner").is_visible()
    page.fill('input[name="note"][form="bulk-form"]', "provider is back")
    bulk = page.locator('button[data-role="bulk-submit"]')
    assert bulk.inner_text() == "Requeue 12 receipts… (dry run first)"
    bulk.click()
    page.wait_for_url(re.compile(r"/plans/"))
    assert page.get_by_text("Dry run: 12 receipts").is_visible()
    assert page.locator("tr.outcome-requeued td.num").inner_text() == "12"
    screenshot(page, "05-requeue-plan-dry-run")
    # The plan runs on the worker; the progress panel polls itself until it is done.
    page.click('button[data-action="execute-plan"]')
    page.wait_for_selector('[data-plan-state="done"]', timeout=WORKER_WAIT_MS)
    assert page.get_by_text("12 of 12 processed").is_visible()
    screenshot(page, "06-requeue-plan-done")
    assert "receipts_app.tasks.run_requeue_plan" in worker.log()
    plan = RequeuePlan.objects.get()
    assert plan.state == "done" and plan.result_counts.get("requeued") == 12
    assert (
        not MemoryDurableReceipt.objects.filter(pk=data["abandoned"].pk)
        .exclude(status="repair_abandoned")
        .exists()
    )

    # 8. Acknowledge an abandoned repair with a reason (HTML in it stays text).
    abandoned = data["abandoned"]
    page.goto(f"{base}/receipts/{abandoned.receipt_id}/")
    page.fill('textarea[name="reason"]', f"archive lost upstream {XSS}")
    page.click('button[data-action="acknowledge"]')
    page.wait_for_selector("h1 .status:text-is('acknowledged')")
    assert page.locator(".event-reason").filter(has_text="<script>window.__pwned").count() == 1
    screenshot(page, "07-receipt-acknowledged")

    # 9. All of it is in the audit log, by user.
    page.goto(f"{base}/audit/?actor=otto")
    table = page.locator("#audit-table")
    assert table.get_by_text("acknowledge", exact=True).count() == 1
    assert table.locator("td", has_text=re.compile(r"^requeue$")).count() == 13
    assert table.get_by_text("archive lost upstream").count() == 1
    screenshot(page, "08-audit-log-by-operator")
    events = ReceiptEvent.objects.filter(actor="otto", surface="console")
    assert events.filter(action="requeue").count() == 13
    assert events.filter(action="acknowledge", outcome="acknowledged").count() == 1

    assert page.evaluate("window.__pwned") is None
    assert page.dialogs == []


def test_script_in_transcript_and_reason_is_shown_as_text(page, live_server, screenshot):
    make_user("vera", "viewer")
    session = make_session("agent:main:webchat:xss")
    append_message(session.session_key, role="user", content=XSS)
    append_message(session.session_key, role="assistant", content="long " + XSS * 40)
    receipt = make_receipt(
        session_key=session.session_key,
        session_id=session.session_id,
        status="checkpoint_failed",
        reason=XSS,
    )
    base = live_server.url
    log_in(page, base, "vera")
    for path in (
        f"/sessions/s/{session.session_key}",
        f"/receipts/{receipt.receipt_id}/",
        "/receipts/?status=checkpoint_failed",
        "/",
    ):
        page.goto(base + path)
        page.wait_for_load_state("networkidle")
        assert page.evaluate("window.__pwned") is None, path
    page.goto(f"{base}/sessions/s/{session.session_key}")
    assert page.locator("pre.msg-body").first.inner_text() == XSS
    assert page.locator("details summary").first.is_visible()  # long content collapsed
    # The memory panel arrived through htmx and the viewer sees no trigger buttons.
    page.wait_for_selector("#session-memory .coverage")
    assert page.locator('[data-action="checkpoint-now"]').count() == 0
    screenshot(page, "09-session-transcript-escaped")
    assert page.dialogs == []
