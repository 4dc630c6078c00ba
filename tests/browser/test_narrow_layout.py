"""What each row says at 390 px and at 1400 px, with three gateways (issue 28, item 5).

In Chromium, on every console and operations page, as viewer, operator and admin:

- the page never scrolls sideways, and no table cell is clipped by a scroll box (a table
  keeps its columns on the screen, or becomes cards);
- every row or card of a list spanning several gateways names its gateway (two gateways'
  ``agent:main:webchat:default`` rows must not look alike);
- a session key wraps only after a ``:``, never mid-word;
- every value of a card has its label (the liveness tables, the time-at-risk table, the
  gateway link's gap and reading age).

Operator screenshots go to ``var/screenshots/narrow-*.png``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings

from opensquilla_site.gentle_stop import STATUS_FOLDER
from opensquilla_site.timeutil import now_ms
from operations_app import heartbeats
from operations_app.models import GatewayLink, GatewayMemoryVerdict
from sessions_app.gateways import Gateway, ensure_gateway, using_gateway
from tests.factories import make_receipt, make_session, make_user

from .conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTHS = (1400, 390)
ROLES = ("viewer", "operator", "admin")
GATEWAYS = ("local", "edge-b", "edge-c")
KEY = "agent:main:webchat:default"
LONG_KEY = "agent:research-assistant:telegram:group:-1001234567890:topic:4242:thread"

# Every element right of the screen inside <main>, or a cell clipped by its scroll box.
CLIPPED = """
() => {
  const out = [];
  for (const cell of document.querySelectorAll("main td, main th")) {
    const box = cell.getBoundingClientRect();
    if (!box.width || getComputedStyle(cell).visibility === "hidden") continue;
    const head = cell.closest("thead");  // a stacked table's header: there for screen readers
    if (head && getComputedStyle(head).clipPath !== "none") continue;
    if (box.right > window.innerWidth + 1 || box.left < -1) {
      out.push(cell.closest("table").className + " | " + cell.outerHTML.slice(0, 90));
    }
  }
  return out.slice(0, 6);
}
"""

# Each key's line breaks: the character before a break must be ":" (or a space).
BROKEN_KEYS = """
() => {
  const out = [];
  for (const key of document.querySelectorAll(".skey")) {
    if (!key.getClientRects().length) continue;
    const range = document.createRange();
    let text = "", tops = [];
    const walker = document.createTreeWalker(key, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (let i = 0; i < node.data.length; i++) {
        range.setStart(node, i); range.setEnd(node, i + 1);
        const rect = range.getClientRects()[0];
        if (!rect) continue;
        text += node.data[i]; tops.push(rect.top);
      }
    }
    for (let i = 1; i < text.length; i++) {
      if (tops[i] > tops[i - 1] + 2 && !/[:\\s]/.test(text[i - 1])) {
        out.push(text.slice(0, i) + " | " + text.slice(i));
        break;
      }
    }
  }
  return out.slice(0, 5);
}
"""

# The label a cell shows before its value (a stacked table's ::before), "" when none.
LABELS = """
(selector) => Array.from(document.querySelectorAll(selector))
  .filter((cell) => cell.getClientRects().length && cell.textContent.trim())
  .map((cell) => [getComputedStyle(cell, "::before").content.replace(/^"|"$/g, "").replace(/:\\s*$/, ""),
                  cell.textContent.trim().slice(0, 40)])
"""


def _supervised(name: str, restarts: int) -> None:
    """A status file as ``make run``'s supervisor writes it (this process stands in)."""
    folder = Path(django_settings.VAR_DIR) / STATUS_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    now = now_ms()
    (folder / f"{name}.json").write_text(
        json.dumps(
            {
                "name": name,
                "state": "running",
                "restarts": restarts,
                "supervisor_pid": os.getpid(),
                "started_at": now - 60_000,
                "last_exit": {"text": "signal SIGKILL", "at": now - 61_000},
            }
        )
    )


def _seed() -> None:
    for role in ROLES:
        make_user(f"{role}-narrow", role)
    for gateway in GATEWAYS:
        ensure_gateway(gateway)
        with using_gateway(gateway):
            for key in (KEY, LONG_KEY):
                session = make_session(key, messages=1)
                make_receipt(
                    session_key=key,
                    session_id=session.session_id,
                    status="checkpoint_failed",
                    reason=f"[Errno 28] No space left on device: '/srv/{gateway}/memory/x.jsonl'",
                )
    heartbeats.mark_started("worker", "celery@edge-host-with-a-long-name-b")
    heartbeats.mark_started("beat", "beat@web-1")
    Gateway.objects.filter(name="edge-b").update(rpc_address="ws://127.0.0.1:9/ws")
    link = GatewayLink.objects.create(
        gateway_id="edge-b",
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
    from operations_app.time_at_risk import track_time_at_risk
    from receipts_app.counts import rebuild_counts
    from receipts_app.failure_groups import rebuild_groups

    rebuild_counts()
    rebuild_groups()
    track_time_at_risk()


PAGES = {
    "overview": "/",
    "fleet": "/fleet/",
    "receipts": "/receipts/",
    "sessions": "/sessions/",
    "session-detail": f"/sessions/s/{LONG_KEY}?gateway=edge-b",
    "plans": "/plans/",
    "audit": "/audit/",
    "agent": "/agents/main/?gateway=edge-b",
    "liveness": "/operations/liveness/",
}


def _open(page: Any, url: str) -> None:
    page.goto(url)
    page.wait_for_load_state("networkidle")


def _fits(page: Any, what: str) -> None:
    scroll, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert scroll <= inner, f"{what}: the page scrolls sideways ({scroll} > {inner})"
    clipped = page.evaluate(CLIPPED)
    assert clipped == [], f"{what}: cells off the screen: {clipped}"
    broken = page.evaluate(BROKEN_KEYS)
    assert broken == [], f"{what}: a key broken mid-word: {broken}"


def test_every_page_keeps_its_columns_keys_and_labels_for_every_role(
    browser, live_server, screenshot
):
    _seed()
    base = live_server.url
    for role in ROLES:
        for width in WIDTHS:
            context = browser.new_context(viewport={"width": width, "height": 900})
            page = context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc, errors=errors: errors.append(str(exc)))
            log_in(page, base, f"{role}-narrow")
            pages = dict(PAGES)
            if role == "admin":
                pages["alerts"] = "/operations/alerts/"
            for name, path in pages.items():
                _open(page, base + path)
                _fits(page, f"{role} {width}px {name}")
                if role == "operator":
                    screenshot(page, f"narrow-{width}-{name}")
            assert errors == [], f"{role} at {width}px: {errors}"
            context.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_every_row_names_its_gateway_when_the_list_spans_gateways(browser, live_server, width):
    _seed()
    base = live_server.url
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    log_in(page, base, "viewer-narrow")

    _open(page, f"{base}/receipts/")
    rows = page.locator("tr.receipt-row")
    assert rows.count() == 2 * len(GATEWAYS)
    seen = set()
    for i in range(rows.count()):
        label = rows.nth(i).locator(".gateway-label")
        assert label.is_visible(), f"receipt row {i} hides its gateway at {width}px"
        seen.add(label.inner_text().lstrip("@"))
    assert seen == set(GATEWAYS)
    # One gateway chosen: the list spans one, and its rows still read as before.
    _open(page, f"{base}/receipts/?gateway=local")
    assert page.locator("tr.receipt-row .gateway-label").count() == 0

    _open(page, f"{base}/sessions/")
    rows = page.locator("#session-table tbody tr")
    assert rows.count() == 2 * len(GATEWAYS)
    for i in range(rows.count()):
        label = rows.nth(i).locator(".gateway-label")
        assert label.is_visible(), f"session row {i} hides its gateway at {width}px"

    _open(page, f"{base}/")
    for what in ("article.card:has(h2 code)", "tr.failure-group"):
        items = page.locator(what)
        assert items.count() >= len(GATEWAYS), what
        names = set()
        for i in range(items.count()):
            label = items.nth(i).locator(".gateway-label")
            assert label.is_visible(), f"{what} {i} hides its gateway at {width}px"
            names.add(label.inner_text().lstrip("@"))
        assert names == set(GATEWAYS), what
    page.locator("table.time-at-risk").wait_for()
    cells = page.locator("table.time-at-risk td.gateway")
    assert cells.count() >= len(GATEWAYS)
    for i in range(cells.count()):
        assert cells.nth(i).is_visible()
    context.close()


def test_every_card_value_has_its_label_at_390px(
    browser, live_server, screenshot, settings, tmp_path
):
    _seed()
    # Status files of this test's own, not left in the shared var/ for later liveness tests.
    settings.VAR_DIR = tmp_path
    _supervised("web", 2)
    _supervised("worker", 0)
    base = live_server.url
    context = browser.new_context(viewport={"width": 390, "height": 900})
    page = context.new_page()
    log_in(page, base, "operator-narrow")

    _open(page, f"{base}/operations/liveness/")
    processes = page.locator("section[aria-labelledby=processes-title] table")
    processes.wait_for()
    labels = dict(page.evaluate(LABELS, "section[aria-labelledby=processes-title] tbody td"))
    for column in ("Restarts", "Last exit", "Up since"):
        assert column in labels, f"Processes at 390 px: no {column!r} ({labels})"
    queue = dict(page.evaluate(LABELS, "section[aria-labelledby=queues-title] tbody td"))
    assert "Waiting" in queue, queue
    screenshot(page, "narrow-390-liveness-labels")

    _open(page, f"{base}/agents/main/?gateway=edge-b")
    link = dict(page.evaluate(LABELS, "table.gateway-verdicts tbody td"))
    assert "Gap" in link and "Read" in link, link

    _open(page, f"{base}/")
    page.locator("table.time-at-risk").wait_for()
    risk = dict(page.evaluate(LABELS, "table.time-at-risk tbody td"))
    for column in ("Open failures", "At risk for", "MTTR 30 d"):
        assert column in risk, risk
    context.close()
