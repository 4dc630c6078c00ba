"""Every console page, found from the URL patterns, as viewer, operator and admin at 1400 px and
390 px in Chromium, with the demo data (``seed_demo``) and three gateways.

The pages are not listed here: every console GET route of tests/security/test_url_role_matrix.py's
table (which fails when a URL has no entry) is walked, its path parameters filled from the
seeded rows (``PARAMS``), so a new page is walked as soon as it is routed. Per page and role:

- the answer is the page (200), or the role's "Not allowed" page (403) when the table says the
  role may not, never a 500;
- no console error, page error or failed request (the htmx fragments a page loads included);
- at 390 px the page never scrolls sideways, and no box hides its text (clipped, or a table left
  scrolling in its box instead of becoming cards); no gateway or agent name is split over two
  lines where it fits on one;
- every form or htmx action on the page is one the role may use (a viewer sees no requeue or
  acknowledge), and the ones it may use are there;
- every link within the site opens (no 4xx/5xx), checked once per role.

Screenshots (``WALK_SCREENSHOTS=1``) go to ``var/screenshots/walk-<role>-<width>-<page>.png``.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from django.urls import resolve
from django.urls.exceptions import Resolver404

from operations_app.models import AlertDelivery, AlertRule
from receipts_app.audit import Actor
from receipts_app.models import MemoryDurableReceipt
from receipts_app.requeue import create_requeue_plan
from sessions_app.gateways import ensure_gateway
from tests.factories import make_user
from tests.security.test_url_role_matrix import (
    ADMIN,
    EXPECTED,
    OPERATOR,
    VIEWER,
    all_endpoints,
)

from .conftest import log_in
from .test_narrow_layout import LONG_KEY
from .test_narrow_layout import _seed as seed_three_gateways

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ROLES = {"viewer": VIEWER, "operator": OPERATOR, "admin": ADMIN}
WIDTHS = (1400, 390)
SHOOT = os.environ.get("WALK_SCREENSHOTS") == "1"

# Elements inside <main> whose box hides part of their text: overflow clipped with no ellipsis,
# or (on a phone) a scroll box whose content is wider than it, i.e. a table that stayed a table.
HIDDEN_TEXT = """
(phone) => {
  const out = [];
  for (const el of document.querySelectorAll("main *")) {
    if (!el.getClientRects().length || el.scrollWidth <= el.clientWidth + 1) continue;
    if (el.closest("thead")) continue;  // a card table's heads: kept for screen readers only
    const style = getComputedStyle(el);
    const clipped = ["hidden", "clip"].includes(style.overflowX) && style.textOverflow !== "ellipsis";
    const scrolls = ["auto", "scroll"].includes(style.overflowX) && el.tagName !== "PRE"
      && el.tagName !== "TEXTAREA" && el.querySelector("table");
    if ((clipped && el.textContent.trim()) || (phone && scrolls)) {
      out.push(`${el.tagName}.${el.className} ${el.scrollWidth}>${el.clientWidth}`);
    }
  }
  return out.slice(0, 5);
}
"""

# A gateway's or agent's name split over two lines ("@edge-" / "c") where it would fit on one.
BROKEN_NAMES = """
() => Array.from(document.querySelectorAll("main .gateway-label, main .agent-name"))
  .filter((e) => e.getClientRects().length > 1).map((e) => e.textContent).slice(0, 5)
"""

# Every form and htmx action on the page: [method, url] (forms by their action).
ACTIONS = """
() => [
  ...Array.from(document.querySelectorAll("form[method=post], form[method=POST]"))
    .map((f) => ["POST", f.getAttribute("action") || location.pathname]),
  ...Array.from(document.querySelectorAll("[hx-post]")).map((e) => ["POST", e.getAttribute("hx-post")]),
]
"""

LINKS = """
() => Array.from(document.querySelectorAll("a[href]"))
  .map((a) => a.href).filter((h) => h.startsWith(location.origin))
"""

# htmx idle, and every panel a page loads after it renders (hx-trigger="load", swapped by its
# outerHTML) swapped in: leaving earlier would abort its request.
SETTLED = """() => !document.querySelector(
  '.htmx-request, .htmx-swapping, .htmx-settling, [hx-trigger="load"]')"""


def _seed(tmp_path: Any, settings: Any) -> dict[str, str]:
    """Three gateways' rows (users ``<role>-narrow``), the demo's every status, a plan, an
    alert rule with a delivery; returns each path parameter's value."""
    from receipts_app.management.demo import seed_demo

    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(tmp_path / "ws")
    settings.OPENSQUILLA_MEMORY_WORKSPACE = None
    settings.VAR_DIR = tmp_path
    seed_three_gateways()
    # The demo saves real checkpoints (async_to_sync): not in Playwright's loop's thread.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(seed_demo).result()
    from operations_app.time_at_risk import track_time_at_risk
    from receipts_app.counts import rebuild_counts
    from receipts_app.failure_groups import rebuild_groups

    rebuild_counts()
    rebuild_groups()
    track_time_at_risk()
    failed = MemoryDurableReceipt.objects.filter(
        status="checkpoint_failed", gateway_id="local"
    ).first()
    saved = MemoryDurableReceipt.objects.filter(status="checkpoint_saved").first()
    abandoned = MemoryDurableReceipt.objects.filter(status="repair_abandoned").first()
    plan = create_requeue_plan(
        filters={}, receipt_ids=[failed.receipt_id], actor=Actor("walk", "console")
    )
    rule = AlertRule.objects.create(
        name="walk", condition="failure_status", threshold=1, channel="email", target="a@b.co"
    )
    AlertDelivery.objects.create(rule=rule, kind="test")
    return {
        "receipt_id": failed.receipt_id,
        "saved_receipt_id": saved.receipt_id,
        "abandoned_receipt_id": abandoned.receipt_id,
        "plan_id": plan.plan_id,
        "name": "edge-b",
        "agent_id": "main",
        "rule_id": str(rule.pk),
        "session_key": LONG_KEY,
    }


# A route's parameter filled from another row than the default's (the restore page and its
# downloads need a saved checkpoint); and the query a page needs.
PARAM_BY_ROUTE = {
    "receipts:checkpoint": {"receipt_id": "saved_receipt_id"},
    "receipts:checkpoint_jsonl": {"receipt_id": "saved_receipt_id"},
    "receipts:checkpoint_markdown": {"receipt_id": "saved_receipt_id"},
}
QUERY_BY_ROUTE = {
    "receipts:session_memory": "?key={session_key}&gateway=edge-b",
    "sessions:detail": "?gateway=edge-b",
    "agents:detail": "?gateway=edge-b",
}
DOWNLOADS = {"receipts:checkpoint_jsonl", "receipts:checkpoint_markdown"}
# Pages beyond one per route: the rows a role acts on (its forms are checked there).
EXTRA = {
    "receipts-failed": "/receipts/?status=checkpoint_failed",
    "receipt-abandoned": "/receipts/{abandoned_receipt_id}/",
}


def _path(route: str, values: dict[str, str], key: str) -> str:
    renames = PARAM_BY_ROUTE.get(key, {})

    def fill(match: re.Match) -> str:
        name = match.group(1).split(":")[-1]
        return quote(values[renames.get(name, name)], safe=":")

    return "/" + re.sub(r"<([^>]+)>", fill, route)


def console_pages(values: dict[str, str]) -> dict[str, tuple[str, int]]:
    """{route name: (path, least level)} for every console GET route, and the extra pages."""
    pages: dict[str, tuple[str, int]] = {}
    for endpoint in all_endpoints():
        rule = EXPECTED.get((endpoint.key, "GET"))
        if rule is None or rule.area != "console":
            continue
        query = QUERY_BY_ROUTE.get(endpoint.key, "").format(**values)
        pages[endpoint.key] = (_path(endpoint.route, values, endpoint.key) + query, rule.level)
    for name, path in EXTRA.items():
        pages[name] = (path.format(**{k: quote(v, safe=":") for k, v in values.items()}), VIEWER)
    return pages


def _least_level(method: str, url: str) -> int:
    try:
        match = resolve(urlsplit(url).path)
    except Resolver404:
        raise AssertionError(f"an action to a URL that does not exist: {method} {url}") from None
    # A form posting back to its own page (the alert form) is gated as the page is.
    rule = EXPECTED.get((match.view_name, method)) or EXPECTED.get((match.view_name, "GET"))
    assert rule is not None, f"an action the table does not know: {method} {url}"
    return rule.level


def _watch(page: Any) -> list[str]:
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(f"pageerror: {exc}"))

    def on_console(msg: Any) -> None:
        # A failed load is reported by on_response below (an expected refusal page aside).
        if msg.type == "error" and not msg.text.startswith("Failed to load resource"):
            problems.append(f"console: {msg.text}")

    page.on("console", on_console)
    page.on(
        "requestfailed",
        lambda r: problems.append(f"failed on {page.url}: {r.url} {r.failure}"),
    )

    def on_response(response: Any) -> None:
        # A page's own refusal is checked by its caller; a fragment it loads must not fail.
        if response.status >= 400 and response.request.resource_type != "document":
            problems.append(f"HTTP {response.status} {response.url}")

    page.on("response", on_response)
    return problems


def _visit(page: Any, url: str) -> int:
    response = page.goto(url)
    page.wait_for_load_state("load")
    page.wait_for_function(SETTLED)
    return response.status


def test_every_console_page_for_every_role_at_both_widths(
    browser, live_server, screenshot, tmp_path, settings
):
    values = _seed(tmp_path, settings)
    base = live_server.url
    pages = console_pages(values)
    # Every problem of the walk, reported together (one run shows all that is wrong).
    found: list[str] = []

    def check(ok: Any, message: str) -> bool:
        if not ok:
            found.append(message)
        return bool(ok)

    assert {"receipts:overview", "receipts:checkpoint", "operations:gateway_link"} <= set(pages)
    for width in WIDTHS:  # the login page, before anyone logs in
        context = browser.new_context(viewport={"width": width, "height": 900})
        page = context.new_page()
        problems = _watch(page)
        check(_visit(page, f"{base}/accounts/login/") == 200, f"login at {width}px")
        scroll, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        check(scroll <= inner + 1, f"login at {width}px: scrolls sideways ({scroll} > {inner})")
        check(problems == [], f"login at {width}px: {problems}")
        if SHOOT:
            screenshot(page, f"walk-anonymous-{width}-login")
        context.close()
    for role, level in ROLES.items():
        seen_actions: set[str] = set()
        role_links: set[str] = set()
        for width in WIDTHS:
            context = browser.new_context(viewport={"width": width, "height": 900})
            context.set_default_timeout(15_000)
            page = context.new_page()
            problems = _watch(page)
            log_in(page, base, f"{role}-narrow")
            page.wait_for_function(SETTLED)  # the overview it lands on loads its panels
            for name, (path, least) in pages.items():
                what = f"{role} {width}px {name} ({path})"
                if name in DOWNLOADS:
                    status = context.request.get(base + path).status
                    check(status == (200 if level >= least else 403), f"{what}: answered {status}")
                    continue
                status = _visit(page, base + path)
                if level < least:
                    check(status == 403, f"{what}: answered {status}, not the refusal")
                    refused = page.locator("h1", has_text="Not allowed").count() == 1
                    check(refused, f"{what}: no 'Not allowed' page")
                    continue
                check(status == 200, f"{what}: answered {status}")
                scroll, inner = page.evaluate(
                    "[document.documentElement.scrollWidth, window.innerWidth]"
                )
                check(scroll <= inner + 1, f"{what}: scrolls sideways ({scroll} > {inner})")
                hidden = page.evaluate(HIDDEN_TEXT, width < 500)
                check(hidden == [], f"{what}: text hidden by its box: {hidden}")
                broken = page.evaluate(BROKEN_NAMES)
                check(broken == [], f"{what}: names split over two lines: {broken}")
                for method, url in page.evaluate(ACTIONS):
                    check(_least_level(method, url) <= level, f"{what}: offers {method} {url}")
                    seen_actions.add(resolve(urlsplit(url).path).view_name)
                if width == WIDTHS[0]:
                    role_links.update(page.evaluate(LINKS))
                if SHOOT:
                    screenshot(page, f"walk-{role}-{width}-{name.replace(':', '-')}")
            check(problems == [], f"{role} at {width}px: {problems}")
            # Every link the role was shown opens (collected at the first width).
            for url in sorted(role_links) if width == WIDTHS[0] else ():
                if urlsplit(url).path == "/accounts/logout/":
                    continue
                status = context.request.get(url).status
                check(status < 400, f"{role}: the link {url} answers {status}")
            context.close()
        # What each role may do is offered where it applies.
        may = {
            "viewer": set(),
            "operator": {"receipts:requeue", "receipts:acknowledge", "receipts:plan_create"},
            "admin": {"receipts:requeue", "receipts:acknowledge", "receipts:gateway_repairs"},
        }[role]
        check(may <= seen_actions, f"{role}: never offered {may - seen_actions}")
        if role == "viewer":
            check(seen_actions <= {"logout"}, f"viewer offered {seen_actions}")
    assert found == [], "\n".join(found)


def test_a_range_filter_keeps_its_two_ends_on_one_row_on_a_phone(browser, live_server):
    # Wrapped apart, "Created from" ended a row and a lone "to" began the next one, under
    # "Reason contains": the bound read as belonging to the field above it. (Which fields
    # share a row depends on which show: the gateway select shows with two gateways.)
    ensure_gateway("local")
    ensure_gateway("edge-b")
    make_user("walk-ranges", "viewer")
    context = browser.new_context(viewport={"width": 390, "height": 900})
    page = context.new_page()
    log_in(page, live_server.url, "walk-ranges")
    page.goto(f"{live_server.url}/receipts/")
    for low, high in (
        ("created_from", "created_to"),
        ("updated_from", "updated_to"),
        ("attempts_min", "attempts_max"),
    ):
        start = page.locator(f'form.filters input[name="{low}"]').bounding_box()
        end = page.locator(f'form.filters input[name="{high}"]').bounding_box()
        assert abs(start["y"] - end["y"]) < 2, f"{high} is not beside {low}: {start} {end}"
        assert end["x"] > start["x"] + start["width"], f"{high} is left of {low}"
        assert end["x"] + end["width"] <= 390, f"{high} is off the screen"
    context.close()
