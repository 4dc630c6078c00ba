"""Every console page at 1400 px and 390 px as viewer, operator and admin (issue 10, item 7),
and every button working on receipts whose ids carry ``#``, spaces, dots, quotes, slashes and
unicode (item 4), in Chromium.

Per page: no horizontal page overflow (the receipts table scrolls in its own box), no console
error or page error, and no dead button (every enabled button submits a form, sends an htmx
request or is one of console.js's actions). Operator screenshots go to ``var/screenshots/``.
"""

from __future__ import annotations

from typing import Any

import pytest

from opensquilla_site.celery import app as celery_app
from operations_app.models import GatewayLink, GatewayMemoryVerdict
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent, RequeuePlan
from sessions_app.gateways import Gateway, ensure_gateway
from sessions_app.services import append_message
from tests.factories import make_receipt, make_session, make_user

from .conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ODD_IDS = [
    "#hash 1",
    "with space",
    "dots.in.the.id",
    'quote\'s "double"',
    "slash/only",
    "ünïcødé ✓",
]
WIDTHS = (1400, 390)
ROLES = ("viewer", "operator", "admin")
# Buttons whose behaviour lives in static/console/console.js.
JS_ACTIONS = ("select-all-matching", "clear-selection")

DEAD_BUTTONS = """
(jsActions) => Array.from(document.querySelectorAll("button, summary.button"))
  .filter((b) => !b.disabled && b.offsetParent !== null)
  .filter((b) => !(
    b.tagName === "SUMMARY" ||
    (b.type === "submit" && b.form) ||
    b.closest("[hx-post], [hx-get]") ||
    jsActions.includes(b.dataset.action)))
  .map((b) => b.outerHTML.slice(0, 120))
"""


def _seed() -> dict[str, Any]:
    for role in ROLES:
        make_user(f"{role}-user", role)
    session = make_session("agent:main:webchat:layout", messages=3)
    append_message(session.session_key, role="assistant", content="a long line " * 80)
    rows = [
        make_receipt(
            receipt_id=rid,
            session_key=session.session_key,
            session_id=session.session_id,
            turn_id=f"turn-{i}",
            status="checkpoint_failed",
            reason=f"[Errno 28] No space left on device: '/srv/ws/memory/.checkpoints/{i}.jsonl'",
            idempotency_key=f"checkpoint:{session.session_key}:turn-{i}:odd",
        )
        for i, rid in enumerate(ODD_IDS)
    ]
    abandoned = [
        make_receipt(
            receipt_id=f"repair {rid}",
            scope="repair",
            status="repair_abandoned",
            reason="provider_failed_archived",
            attempt_count=4,
        )
        for rid in ODD_IDS
    ]
    # A linked gateway's stored reading (no gateway is asked by a page): the overview's and
    # the agent page's "gateway's own view" rows, and an admin's repair button.
    ensure_gateway("edge-gateway-with-a-long-name")
    Gateway.objects.filter(name="edge-gateway-with-a-long-name").update(
        rpc_address="ws://127.0.0.1:9/ws"
    )
    link = GatewayLink.objects.create(
        gateway_id="edge-gateway-with-a-long-name",
        state="ok",
        server_version="0.5.3",
        methods=["doctor.memory.status", "memory.repair.run"],
        scopes=["operator.admin"],
    )
    GatewayMemoryVerdict.objects.create(
        gateway=link,
        agent_id="main",
        answered_at=link.checked_at,
        memory_safety="error",
        repair_status="degraded",
        repair_backlog_count=3,
        pending_repair_count=1,
        repair_failures=[{"summaryId": 4}],
        raw_fallback_count=2,
    )
    return {"session": session, "rows": rows, "abandoned": abandoned}


def _watch(page: Any) -> list[str]:
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"pageerror: {exc}"))
    page.on(
        "console",
        lambda msg: (
            problems.append(f"console.{msg.type}: {msg.text}") if msg.type == "error" else None
        ),
    )
    page.on(
        "response",
        lambda r: problems.append(f"HTTP {r.status} {r.url}") if r.status >= 500 else None,
    )
    return problems


def _check(page: Any, what: str) -> None:
    page.wait_for_load_state("networkidle")
    width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    wide = page.evaluate(
        "() => Array.from(document.querySelectorAll('main *'))"
        ".filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1)"
        ".slice(0, 5).map((e) => e.outerHTML.slice(0, 100))"
    )
    assert width[0] <= width[1], (
        f"{what}: the page scrolls sideways ({width[0]} > {width[1]}): {wide}"
    )
    assert page.evaluate(DEAD_BUTTONS, list(JS_ACTIONS)) == [], f"{what}: dead buttons"


def test_every_page_fits_at_both_widths_for_every_role(browser, live_server, screenshot):
    data = _seed()
    plan = RequeuePlan.objects.create(created_by="x", surface="console", filters={}, receipt_ids=[])
    base = live_server.url
    first = data["rows"][0]
    pages = {
        "overview": "/",
        "receipts": "/receipts/?status=checkpoint_failed",
        "receipt-detail": f"/receipts/{first.receipt_id.replace('#', '%23').replace(' ', '%20')}/",
        "plans": "/plans/",
        "plan-detail": f"/plans/{plan.plan_id}/",
        "sessions": "/sessions/",
        "session-detail": f"/sessions/s/{data['session'].session_key}",
        "audit": "/audit/",
        "agent": "/agents/main/?gateway=edge-gateway-with-a-long-name",
    }
    for role in ROLES:
        for width in WIDTHS:
            context = browser.new_context(viewport={"width": width, "height": 900})
            page = context.new_page()
            problems = _watch(page)
            log_in(page, base, f"{role}-user")
            assert page.locator(".role").inner_text() == role
            for name, path in pages.items():
                page.goto(base + path)
                _check(page, f"{role} {width}px {name}")
                if role == "operator":
                    screenshot(page, f"layout-{width}-{name}")
            assert problems == [], f"{role} at {width}px: {problems}"
            context.close()


def test_buttons_work_on_odd_ids(browser, live_server, settings, screenshot, monkeypatch):
    # Nothing runs the queued work: only the console. Celery read Django's settings once, at
    # its first use in this test run, so its own conf is switched too.
    settings.CELERY_TASK_ALWAYS_EAGER = False
    monkeypatch.setitem(celery_app.conf, "task_always_eager", False)
    data = _seed()
    base = live_server.url
    for width in WIDTHS:
        context = browser.new_context(viewport={"width": width, "height": 900})
        page = context.new_page()
        problems = _watch(page)
        log_in(page, base, "operator-user")

        # Every row's Requeue, with a reason, swaps that row only.
        page.goto(f"{base}/receipts/?status=checkpoint_failed")
        for row in data["rows"]:
            if width != WIDTHS[0]:
                break  # the 1400 px pass requeued them all; 390 px opens the detail below
            tr = page.locator("tr.receipt-row").filter(
                has=page.locator(f'input[value="{_css(row.receipt_id)}"]')
            )
            tr.locator('[data-action="row-requeue-open"]').click()
            tr.locator('input[name="reason"]').fill(f"odd id {row.receipt_id}")
            tr.locator('[data-action="row-requeue"]').click()
            page.locator("tr.receipt-row .flash-inline").filter(has_text="requeued").nth(
                data["rows"].index(row)
            ).wait_for()
        _check(page, f"receipts after row requeues at {width}px")
        if width == WIDTHS[0]:
            assert MemoryDurableReceipt.objects.filter(status="checkpoint_requeued").count() == len(
                ODD_IDS
            )
            for row in data["rows"]:
                event = ReceiptEvent.objects.get(receipt_id=row.receipt_id, action="requeue")
                assert event.reason == f"odd id {row.receipt_id}"

        # The detail page of each odd id: open it from the list, acknowledge with a reason.
        todo = data["abandoned"][:3] if width == WIDTHS[0] else data["abandoned"][3:]
        for row in todo:
            page.goto(f"{base}/receipts/?status=repair_abandoned")
            tr = page.locator("tr.receipt-row").filter(
                has=page.locator(f'input[value="{_css(row.receipt_id)}"]')
            )
            tr.get_by_role("link", name="Open").click()
            page.wait_for_selector("#receipt-detail")
            assert (
                page.locator("#receipt-detail").get_attribute("data-receipt-id") == row.receipt_id
            )
            page.fill('#receipt-detail textarea[name="reason"]', "archive lost")
            page.click('button[data-action="acknowledge"]')
            page.wait_for_selector("#receipt-detail h1 .status:text-is('acknowledged')")
            _check(page, f"detail of {row.receipt_id!r} at {width}px")
        if width == WIDTHS[1]:
            screenshot(page, "odd-id-acknowledged-390")

        assert problems == [], f"{width}px: {problems}"
        context.close()
    assert MemoryDurableReceipt.objects.filter(status="acknowledged").count() == len(ODD_IDS)

    # A plan of odd ids: tick two rows, dry run, confirm.
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    problems = _watch(page)
    log_in(page, base, "operator-user")
    for rid in ODD_IDS[:2]:
        MemoryDurableReceipt.objects.filter(receipt_id=rid).update(status="checkpoint_failed")
    page.goto(f"{base}/receipts/?status=checkpoint_failed")
    for rid in ODD_IDS[:2]:
        page.check(f'input[name="selected"][value="{_css(rid)}"]')
    bulk = page.locator('button[data-role="bulk-submit"]')
    assert bulk.inner_text() == "Requeue 2 selected receipts… (dry run first)"
    bulk.click()
    page.wait_for_selector("text=Dry run: 2 receipts")
    page.click('button[data-action="execute-plan"]')
    page.wait_for_selector(
        '[data-plan-state="queued"], [data-plan-state="running"], [data-plan-state="done"]'
    )
    assert sorted(RequeuePlan.objects.get().receipt_ids) == sorted(ODD_IDS[:2])
    assert problems == []
    context.close()


def _css(value: str) -> str:
    """``value`` inside a double-quoted CSS attribute selector (tests only: the console never
    builds a selector from an id)."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


# --- phones: card rows, groups, time at risk, tap targets, Escape, the audit pager ---------------

IN_VIEW = """
(el) => { const r = el.getBoundingClientRect();
          return r.width > 0 && r.left >= 0 && r.right <= window.innerWidth + 0.5; }
"""
TOO_SMALL = """
(min) => Array.from(document.querySelectorAll(
    "header a, header button, main button, main summary, main .tabs a, main .pager a,"
    + " main td.actions > a, main input[type=checkbox]"))
  .filter((e) => e.offsetParent !== null)
  .map((e) => [e.getBoundingClientRect().height, e.outerHTML.slice(0, 80)])
  .filter(([h]) => h < min)
"""


def _seed_phone_pages() -> None:
    from operations_app.time_at_risk import track_time_at_risk
    from receipts_app.counts import rebuild_counts
    from receipts_app.failure_groups import rebuild_groups

    _seed()
    for i in range(12):
        session = make_session(f"agent:ops:webchat:a-rather-long-session-key-for-a-phone-{i}")
        make_receipt(
            session_key=session.session_key,
            session_id=session.session_id,
            status="checkpoint_failed",
            reason="TimeoutError: memory checkpoint write exceeded 8.0s for " + "x" * 60,
        )
    for i in range(60):
        ReceiptEvent.objects.create(receipt_id=f"event-{i}", action="status_change")
    # Recounted and regrouped from the receipts, not folded: the previous test's flush deleted
    # its receipts after the delta tables, whose -1 rows would cancel this test's in a fold.
    rebuild_counts()
    rebuild_groups()
    track_time_at_risk()


def _phone(browser: Any, base: str, user: str, width: int = 390) -> tuple[Any, Any, list[str]]:
    """One login per test, by a user of its own: the login limit counts every attempt per
    user and per address (5 and 20 a minute), and these tests log in one after another.
    A test that needs another width resizes the page (``page.set_viewport_size``)."""
    make_user(user, "operator")
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    problems = _watch(page)
    log_in(page, base, user)
    return context, page, problems


def _resize(page: Any, width: int) -> None:
    page.set_viewport_size({"width": width, "height": 900})


def test_receipts_are_cards_on_a_phone(browser, live_server, screenshot):
    _seed_phone_pages()
    base = live_server.url
    heights = {}
    context, page, problems = _phone(browser, base, "phone-cards")
    for width in WIDTHS:
        _resize(page, width)
        page.goto(f"{base}/receipts/?status=checkpoint_failed")
        _check(page, f"receipts at {width}px")
        rows = page.locator("tr.receipt-row")
        assert rows.count() == 18
        heights[width] = max(rows.nth(i).bounding_box()["height"] for i in range(rows.count()))
        if width == 390:
            for i in range(rows.count()):
                row = rows.nth(i)
                for part in (".status", "td.key a", "td.reason", "summary.button", "td.c-created"):
                    cell = row.locator(part)
                    assert cell.evaluate(IN_VIEW), f"row {i}: {part} is off screen"
                    assert cell.is_visible(), f"row {i}: {part} hidden"
                assert "ago" in row.locator("td.c-created").inner_text()
                # The session gets a line of its own, not what is left beside the buttons.
                assert row.locator("td.key").bounding_box()["width"] > width / 2, f"row {i}"
            screenshot(page, "phone-390-receipts-cards")
        else:
            assert page.locator("table.receipts thead th").nth(2).is_visible()
    assert problems == []
    context.close()
    # A card is shorter than the wrapped table row was (~210 px): the actions, then the agent
    # and its gateway, the whole session key (wrapped at its ":") and two lines of reason.
    assert heights[390] < 180, heights


def test_failure_groups_keep_the_fingerprint_beside_its_button(browser, live_server, screenshot):
    _seed_phone_pages()
    context, page, problems = _phone(browser, live_server.url, "phone-groups")
    page.wait_for_selector("tr.failure-group")
    page.wait_for_selector("table.time-at-risk tbody tr")
    screenshot(page, "phone-390-overview-groups")
    groups = page.locator("tr.failure-group")
    assert groups.count() >= 2
    for i in range(groups.count()):
        group = groups.nth(i)
        fingerprint = group.locator("td.reason code")
        button = group.locator("summary.button")
        assert fingerprint.evaluate(IN_VIEW) and button.evaluate(IN_VIEW), f"group {i}"
        gap = button.bounding_box()["y"] - (
            fingerprint.bounding_box()["y"] + fingerprint.bounding_box()["height"]
        )
        assert 0 <= gap < 40, f"group {i}: the button is {gap}px from its fingerprint"
    # Time at risk: a card per agent with every column on the screen (none scrolled out of
    # sight), and no trend cell left empty.
    risk_rows = page.locator("table.time-at-risk tbody tr")
    assert risk_rows.count() == 2  # main and ops, both at risk
    for i in range(risk_rows.count()):
        cells = risk_rows.nth(i).locator("td")
        for c in range(cells.count()):
            assert cells.nth(c).evaluate(IN_VIEW), f"time at risk row {i}: column {c} off screen"
        trend = risk_rows.nth(i).locator("td.trend")
        assert trend.locator("svg").count() or trend.inner_text().strip()
    _check(page, "overview at 390px")
    # On a wide screen the groups stay a table with its column heads.
    _resize(page, 1400)
    page.reload()
    page.wait_for_selector("table.time-at-risk tbody tr")
    assert page.locator("table.failure-groups thead th").first.is_visible()
    _check(page, "overview at 1400px")
    screenshot(page, "wide-1400-overview-groups")
    assert problems == []
    context.close()


def test_tap_targets_and_escape_on_a_phone(browser, live_server, screenshot):
    _seed_phone_pages()
    context, page, problems = _phone(browser, live_server.url, "phone-taps")
    for path in ("/", "/receipts/?status=checkpoint_failed", "/audit/"):
        page.goto(live_server.url + path)
        page.wait_for_load_state("networkidle")
        nav = page.locator("header nav a")
        for i in range(nav.count()):
            assert nav.nth(i).bounding_box()["height"] >= 44, nav.nth(i).inner_text()
        assert page.evaluate(TOO_SMALL, 24) == [], path

    page.goto(f"{live_server.url}/receipts/?status=checkpoint_failed")
    row = page.locator("tr.receipt-row").first
    row.locator('[data-action="row-requeue-open"]').click()
    reason = row.locator('input[name="reason"]')
    reason.fill("half typed")
    assert reason.is_visible() and reason.evaluate(IN_VIEW)
    screenshot(page, "phone-390-row-form-open")
    page.keyboard.press("Escape")
    assert not reason.is_visible()
    assert row.locator("details.row-action").get_attribute("open") is None
    assert page.evaluate("document.activeElement.dataset.action") == "row-requeue-open"
    # Escape also closes a form whose focus has moved off it.
    row.locator('[data-action="row-requeue-open"]').click()
    page.locator("h1").click()
    page.keyboard.press("Escape")
    assert not reason.is_visible()
    assert not MemoryDurableReceipt.objects.filter(status="checkpoint_requeued").exists()
    assert problems == []
    context.close()


def test_audit_pager_swaps_only_its_table(browser, live_server):
    _seed_phone_pages()
    context, page, problems = _phone(browser, live_server.url, "phone-audit")
    for width in WIDTHS:
        _resize(page, width)
        page.goto(f"{live_server.url}/audit/?limit=10")
        first = page.locator("#audit-table tbody tr").first.inner_text()
        page.locator('#audit-table a[rel="next"]').click()
        page.wait_for_url(lambda url: "cursor=" in url)
        page.wait_for_load_state("networkidle")
        assert page.locator("header.topbar").count() == 1
        assert page.locator("form.filters").count() == 1
        assert page.locator("#audit-table").count() == 1
        assert page.locator("#audit-table tbody tr").first.inner_text() != first
        page.locator("#audit-table").get_by_role("link", name="« Newest").click()
        page.wait_for_url(lambda url: "cursor=" not in url)
        assert page.locator("header.topbar").count() == 1
        _check(page, f"audit page two at {width}px")
    assert problems == []
    context.close()
