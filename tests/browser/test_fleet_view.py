"""The fleet view and the gateway filter in Chromium at 1400 px and 390 px (issue 19): no
sideways scrolling, every gateway's counts visible, each count's link opens the list of
exactly those rows, and the lists' gateway select changes the URL and the rows."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from receipts_app.models import MemoryDurableReceipt
from sessions_app.gateways import ensure_gateway, using_gateway
from tests.factories import make_receipt, make_session, make_user

from .conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTHS = (1400, 390)
KEY = "agent:main:webchat:default"


def _seed() -> None:
    make_user("fleet-viewer", "viewer")
    ensure_gateway("local")
    ensure_gateway("edge-host-b", opensquilla_version="0.3.0", schema_version="V014")
    for gateway, failed, abandoned in (("local", 1, 0), ("edge-host-b", 3, 2)):
        with using_gateway(gateway):
            session = make_session(KEY, messages=1)
            for i in range(failed):
                make_receipt(
                    session_key=KEY,
                    session_id=session.session_id,
                    status="checkpoint_failed",
                    reason=f"[Errno 28] No space left on device: '/srv/{gateway}/{i}.jsonl'",
                )
            for _ in range(abandoned):
                make_receipt(session_key=KEY, scope="repair", status="repair_abandoned")
            make_receipt(session_key=KEY, session_id=session.session_id)  # saved
    # Recounted from the receipts: the previous test's flush deleted its receipts after the
    # counts table, whose -1 rows would cancel this test's.
    from receipts_app.counts import rebuild_counts
    from receipts_app.failure_groups import rebuild_groups

    rebuild_counts()
    rebuild_groups()


def _no_sideways_scroll(page: Any, what: str) -> None:
    page.wait_for_load_state("networkidle")
    scroll, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert scroll <= inner, f"{what}: the page scrolls sideways ({scroll} > {inner})"


def _listed_ids(page: Any) -> set[str]:
    return set(
        page.locator("tr.receipt-row").evaluate_all(
            "(rows) => rows.map((r) => r.dataset.receiptId)"
        )
    )


def _ids_of(gateway: str | None, statuses: list[str] | None = None) -> set[str]:
    rows = MemoryDurableReceipt.objects.all()
    if gateway:
        rows = rows.filter(gateway_id=gateway)
    if statuses:
        rows = rows.filter(status__in=statuses)
    return set(rows.values_list("receipt_id", flat=True))


@pytest.mark.parametrize("width", WIDTHS)
def test_the_fleet_view_fits_shows_its_counts_and_links_to_their_rows(
    browser, live_server, screenshot, width
):
    _seed()
    base = live_server.url
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("response", lambda r: errors.append(f"{r.status} {r.url}") if r.status >= 500 else None)
    log_in(page, base, "fleet-viewer")
    fleet = page.locator("section#fleet")
    fleet.wait_for()
    _no_sideways_scroll(page, f"overview at {width}px")
    screenshot(page, f"fleet-overview-{width}")
    rows = page.locator("tr.fleet-row")
    assert rows.count() == 2
    edge = page.locator('tr.fleet-row[data-gateway="edge-host-b"]')
    links = edge.locator("a.fleet-link")
    for i in range(links.count()):
        assert links.nth(i).is_visible(), f"count {i} hidden at {width}px"
    at_risk = edge.locator('a[data-count="memory_at_risk"]')
    assert at_risk.inner_text() == "5 at risk"
    assert edge.locator('a[data-count="terminal_repairs"]').inner_text() == "2 given up"
    assert "0.3.0" in edge.inner_text()

    # Each count opens the receipts list of exactly the rows it counted.
    for what in ("memory_at_risk", "terminal_repairs", "receipts"):
        page.goto(f"{base}/")
        link = page.locator(f'tr.fleet-row[data-gateway="edge-host-b"] a[data-count="{what}"]')
        count = int(re.match(r"[\d,]+", link.inner_text())[0].replace(",", ""))
        link.click()
        page.wait_for_url(re.compile(r"/receipts/\?"))
        query = parse_qs(urlsplit(page.url).query)
        assert query["gateway"] == ["edge-host-b"]
        _no_sideways_scroll(page, f"{what} list at {width}px")
        listed = _listed_ids(page)
        assert len(listed) == count
        assert listed == _ids_of("edge-host-b", query.get("status"))

    # A gateway's name opens the overview of that gateway, marked in the fleet.
    page.goto(f"{base}/")
    edge.locator("td.fleet-name a").first.click()
    page.wait_for_url(re.compile(r"/\?gateway=edge-host-b$"))
    page.locator('tr.fleet-row[data-gateway="edge-host-b"][aria-current="true"]').wait_for()
    _no_sideways_scroll(page, f"overview of one gateway at {width}px")
    assert errors == []
    context.close()


def _settled(page) -> None:
    page.wait_for_function(
        "() => !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling')"
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_the_gateway_select_changes_the_url_and_the_rows(browser, live_server, screenshot, width):
    _seed()
    base = live_server.url
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    log_in(page, base, "fleet-viewer")

    page.goto(f"{base}/receipts/")
    assert _listed_ids(page) == _ids_of(None)
    page.select_option('select[name="gateway"]', "edge-host-b")
    page.wait_for_url(re.compile(r"gateway=edge-host-b"))
    page.wait_for_function(
        "(n) => document.querySelectorAll('tr.receipt-row').length === n",
        arg=len(_ids_of("edge-host-b")),
    )
    assert _listed_ids(page) == _ids_of("edge-host-b")
    assert page.locator("#total-matching").inner_text() == str(len(_ids_of("edge-host-b")))
    failed_tab = page.locator("nav.tabs a", has_text="checkpoint_failed")
    assert failed_tab.locator(".count").inner_text() == "3"
    _no_sideways_scroll(page, f"receipts of one gateway at {width}px")
    screenshot(page, f"gateway-filter-{width}")
    # The failed tab keeps the gateway.
    failed_tab.click()
    page.wait_for_url(re.compile(r"status=checkpoint_failed"))
    assert "gateway=edge-host-b" in page.url
    page.wait_for_function("() => document.querySelectorAll('tr.receipt-row').length === 3")
    assert _listed_ids(page) == _ids_of("edge-host-b", ["checkpoint_failed"])
    # Back to every gateway, once htmx has settled the swapped-in form: a select swapped in is
    # bound to its change handler when the swap settles, and a change before that is not sent.
    _settled(page)
    page.select_option('select[name="gateway"]', "")
    page.wait_for_function("() => document.querySelectorAll('tr.receipt-row').length === 4")
    assert "gateway=edge-host-b" not in page.url
    assert _listed_ids(page) == _ids_of(None, ["checkpoint_failed"])

    # The sessions list: the same select.
    page.goto(f"{base}/sessions/")
    page.select_option('select[name="gateway"]', "local")
    page.wait_for_url(re.compile(r"gateway=local"))
    page.wait_for_function(
        "() => document.querySelectorAll('#session-table tbody tr').length === 1"
    )
    _no_sideways_scroll(page, f"sessions of one gateway at {width}px")

    # The audit log and the plans list: the same select, the table swapped in place.
    from receipts_app.audit import Actor
    from receipts_app.requeue import create_requeue_plan

    create_requeue_plan(
        filters={"status": "checkpoint_failed", "gateway": "local"},
        receipt_ids=None,
        actor=Actor("otto", "console"),
    )
    page.goto(f"{base}/plans/")
    assert page.locator("#plan-table tbody tr td.plan-gateway").inner_text() == "local"
    page.select_option('select[name="gateway"]', "edge-host-b")
    page.wait_for_url(re.compile(r"/plans/\?gateway=edge-host-b"))
    page.locator("#plan-table", has_text="No plans of this gateway yet").wait_for()
    _no_sideways_scroll(page, f"plans of one gateway at {width}px")
    page.goto(f"{base}/audit/")
    page.select_option('select[name="gateway"]', "edge-host-b")
    page.wait_for_url(re.compile(r"/audit/\?.*gateway=edge-host-b"))
    _no_sideways_scroll(page, f"audit of one gateway at {width}px")

    # An unknown gateway typed into the address is a message.
    response = page.goto(f"{base}/receipts/?gateway=nowhere")
    assert response.status == 404
    assert "No gateway is named" in page.locator(".flash.error").inner_text()
    context.close()
