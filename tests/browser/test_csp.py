"""Under the strict Content-Security-Policy, Chromium refuses nothing the product serves:
the console pages (htmx included), the admin, and the Swagger UI docs page all load with no
CSP violation and no page error."""

from __future__ import annotations

from typing import Any

import pytest

from tests.factories import make_receipt, make_session, make_user

from .conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _watch(page: Any) -> list[str]:
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on(
        "console",
        lambda msg: problems.append(msg.text) if "Content Security Policy" in msg.text else None,
    )
    return problems


def test_no_page_breaks_the_content_security_policy(page, live_server):
    make_user("ada", "admin")
    row = make_receipt(status="checkpoint_failed")
    session = make_session("agent:main:webchat:csp", messages=2)
    problems = _watch(page)
    base = live_server.url
    log_in(page, base, "ada")
    for path in (
        "/",
        "/receipts/",
        f"/receipts/{row.receipt_id}/",
        "/plans/",
        "/audit/",
        "/sessions/",
        f"/sessions/s/{session.session_key}",
        "/operations/liveness/",
        "/operations/alerts/",
        "/operations/alerts/new/",
        "/admin/",
        "/admin/receipts_app/memorydurablereceipt/",
        f"/admin/receipts_app/memorydurablereceipt/{row.pk}/change/",
    ):
        page.goto(base + path)
        page.wait_for_load_state("load")
        page.wait_for_timeout(300)  # let deferred scripts run and report
        problems.extend(
            f"  ^ on {path}" for _ in [0] if problems and not problems[-1].startswith("  ^")
        )
    page.goto(base + "/api/v1/docs")
    # Swagger UI renders the operations from the schema with its locally served bundle.
    page.wait_for_selector(".swagger-ui .opblock", timeout=30_000)
    assert problems == [], "\n".join(problems)
