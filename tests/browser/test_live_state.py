"""State pages follow the work with a REAL Celery worker (issue 10, item 3): the session
panel turns "Covered." after "Checkpoint now", and a plan's page counts its rows through to
"recovered", with no reload. (The receipt detail following its requeue is in the
walkthrough.)"""

# ruff: noqa: F811 - the worker fixtures are imported by name and requested as arguments

from __future__ import annotations

import re

import pytest

from receipts_app.models import ReceiptEvent, RequeuePlan
from tests.factories import make_receipt, make_session, make_user
from tests.worker.conftest import (  # noqa: F401 - fixtures, used by name
    _broker_reachable,
    celery_queue,
    service_marks,
    shared_workspaces,
    start_worker,
)

from .conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), *service_marks()]

WORKER_WAIT_MS = 60_000


def test_session_panel_and_plan_follow_the_worker(page, live_server, start_worker, screenshot):
    start_worker()
    make_user("otto", "operator")
    base = live_server.url
    log_in(page, base, "otto")

    # "Checkpoint now": the panel says queued, then covered once the worker saved it.
    session = make_session("agent:main:webchat:now", messages=3)
    page.goto(f"{base}/sessions/s/{session.session_key}")
    page.wait_for_selector("#session-memory .coverage.not-covered")
    page.click('[data-action="checkpoint-now"]')
    page.wait_for_selector("#session-memory .flash:has-text('checkpoint queued')")
    page.wait_for_selector("#session-memory .coverage.covered", timeout=WORKER_WAIT_MS)
    screenshot(page, "10-session-covered-after-checkpoint-now")

    # A plan of two failed checkpoints follows them to "recovered".
    failed = []
    for i in range(2):
        live = make_session(f"agent:main:webchat:plan{i}", messages=2)
        failed.append(
            make_receipt(
                session_key=live.session_key,
                session_id=live.session_id,
                status="checkpoint_failed",
                reason="[Errno 28] No space left on device",
            )
        )
    page.goto(
        f"{base}/receipts/?status=checkpoint_failed&session_key_prefix=agent:main:webchat:plan"
    )
    page.check('input[data-action="select-page"]')
    page.fill('input[name="note"][form="bulk-form"]', "disk replaced")
    page.click('button[data-role="bulk-submit"]')
    page.wait_for_url(re.compile(r"/plans/"))
    page.click('button[data-action="execute-plan"]')
    page.wait_for_selector('[data-count="recovered"]:text-is("2")', timeout=WORKER_WAIT_MS)
    assert page.locator('[data-count="pending"]').inner_text() == "0"
    assert page.get_by_text("Every requeued receipt has a final outcome").is_visible()
    screenshot(page, "11-requeue-plan-followed-to-recovered")

    plan = RequeuePlan.objects.get()
    completions = ReceiptEvent.objects.filter(action="requeue_complete", plan_id=plan.plan_id)
    assert sorted(completions.values_list("receipt_id", flat=True)) == sorted(
        r.receipt_id for r in failed
    )
    assert set(completions.values_list("surface", flat=True)) == {"worker"}
