"""One meaning of "at risk" (issue 22, item 5): the overview card, the failure groups, time at
risk, health, /metrics and the at-risk alert give the same number for the same ledger.

Read as each reader meets it: the console pages as a viewer, the API and /metrics with a
read token, the alert rule through its evaluation snapshot.
"""

from __future__ import annotations

import re

import pytest
from django.test import Client

from operations_app.alerts.conditions import Snapshot
from receipts_app.failure_groups import fold_all
from tests.factories import make_receipt, make_user

from .test_metrics import scrape

pytestmark = pytest.mark.django_db

AT_RISK = {"main": 6, "ops": 2}


def _ledger() -> None:
    def row(agent: str, status: str, scope: str = "checkpoint", **fields) -> None:
        make_receipt(session_key=f"agent:{agent}:webchat:x", scope=scope, status=status, **fields)

    # At risk: failures waiting for an operator, and a requeued checkpoint.
    row("main", "checkpoint_failed", reason="disk full at /srv/a.jsonl")
    row("main", "checkpoint_failed", reason="timeout after 5 s")
    row("main", "checkpoint_requeued", reason="timeout after 5 s")
    row("main", "repair_abandoned", "repair", reason="empty_raw_excerpt")
    row("main", "repair_failed", "repair", reason="archive_failed")
    row("main", "receipt_orphaned")
    row("ops", "checkpoint_failed", reason="boom " + "x" * 100_000)
    row("ops", "hash_mismatch")
    # Not at risk: queued for the worker, resolved, or a success that mentions a mismatch.
    row("main", "repair_pending", "repair", reason="no_provider")
    row("main", "acknowledged", reason="known outage")
    row("main", "checkpoint_superseded")
    row("main", "checkpoint_recovered")
    row("ops", "flush_appended", "flush", reason="content hash mismatch")


def _viewer() -> Client:
    make_user("vera", "viewer")
    client = Client()
    client.login(username="vera", password="pw-Secret-123")
    return client


def _card_counts(overview: str) -> dict[str, int]:
    cards = re.finditer(
        r"<h2>Agent (?:<a [^>]*>)?<code>([^<]+)</code>(?:</a>)?</h2>(.*?)</article>",
        overview,
        flags=re.S,
    )
    out = {}
    for card in cards:
        found = re.search(r">([\d,]+) at risk</a>", card[2])
        out[card[1]] = int(found[1].replace(",", "")) if found else 0
    return out


def _group_counts(overview: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in re.finditer(r'<tr class="failure-group">(.*?)</tr>', overview, flags=re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row[1], flags=re.S)
        agent = re.sub(r"<[^>]+>", "", cells[0]).strip()
        out[agent] = out.get(agent, 0) + int(cells[4].replace(",", ""))
    return out


def _time_at_risk_counts(panel: str) -> dict[str, int]:
    return {
        agent: int(n)
        for agent, n in re.findall(
            r'<td><code>([^<]+)</code></td>\s*<td class="num">(\d+)</td>', panel
        )
        if int(n)
    }


def test_every_reader_counts_the_same_receipts_at_risk(read_token):
    _ledger()
    fold_all()  # what the beat task does within seconds
    viewer = _viewer()
    overview = viewer.get("/").content.decode()
    panel = viewer.get("/operations/time-at-risk/").content.decode()
    api = Client().get("/api/v1/health", HTTP_AUTHORIZATION=f"Bearer {read_token}").json()
    metrics = scrape(read_token)["opensquilla_memory_at_risk"]
    alert = Snapshot.read().agents

    assert _card_counts(overview) == AT_RISK
    assert _group_counts(overview) == AT_RISK
    assert "All 8 receipts at risk" in overview
    assert _time_at_risk_counts(panel) == AT_RISK
    assert {i["agentId"]: i["atRisk"]["count"] for i in api["items"]} == AT_RISK
    assert {dict(k)["agent"]: int(v) for k, v in metrics.items() if v} == AT_RISK
    assert {a: s.at_risk for (_g, a), s in alert.items() if s.at_risk} == AT_RISK
