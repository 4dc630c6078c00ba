"""The overview's health cards: every count links to a list of exactly the rows it counted.

Through HTTP, as an operator meets it: render the overview, read each count beside its link,
follow the link, and count the rows the receipts list shows.
"""

from __future__ import annotations

import html
import re

import pytest

from tests.factories import make_receipt

pytestmark = pytest.mark.django_db

CARD = re.compile(
    r'<article class="card health-(?P<tone>\w+)">\s*<h2>Agent (?:<a href="(?P<page>[^"]+)"[^>]*>)?'
    r"<code>(?P<agent>[^<]+)</code>(?P<body>.*?)</article>",
    re.S,
)
LINK = re.compile(
    r'<a class="health-link" href="(?P<href>[^"]+)">(?P<count>[\d,]+) (?P<label>[^<]+)</a>'
)
ROW = re.compile(r'<tr class="receipt-row')


def _cards(client) -> dict[str, dict]:
    body = client.get("/").content.decode()
    cards = {}
    for card in CARD.finditer(body):
        links = {
            m["label"]: (int(m["count"].replace(",", "")), html.unescape(m["href"]))
            for m in LINK.finditer(card["body"])
        }
        cards[html.unescape(card["agent"])] = {
            "tone": card["tone"],
            "body": card["body"],
            "links": links,
            "page": html.unescape(card["page"] or ""),
        }
    return cards


def _listed(client, href: str) -> int:
    response = client.get(href)
    assert response.status_code == 200
    return len(ROW.findall(response.content.decode()))


def _assert_every_link_lists_its_count(client, card) -> None:
    for label, (count, href) in card["links"].items():
        assert _listed(client, href) == count, f"{label!r}: {href}"


def test_a_requeued_checkpoint_is_at_risk_and_its_link_lists_it(viewer_client):
    # The reported bug: "1 failing" linked to a list of 0 rows.
    make_receipt(session_key="agent:main:web:a", status="checkpoint_requeued")
    card = _cards(viewer_client)["main"]
    assert card["links"]["at risk"][0] == 1
    _assert_every_link_lists_its_count(viewer_client, card)


def test_the_backlog_count_and_its_link_are_the_repair_queue(viewer_client):
    # "2 queued" linked to repair_pending + repair_running while it counted the queue.
    key = "agent:main:web:b"
    make_receipt(session_key=key, scope="repair", status="repair_pending")
    make_receipt(session_key=key, scope="repair", status="flush_failed")
    make_receipt(session_key=key, scope="repair", status="distill_failed")
    make_receipt(session_key=key, scope="repair", status="repair_running")  # claimed: not queued
    card = _cards(viewer_client)["main"]
    assert card["links"]["queued"][0] == 3
    _assert_every_link_lists_its_count(viewer_client, card)


def test_a_terminal_repair_failure_is_visible_on_the_card(viewer_client):
    # An agent whose only trouble is repair_failed used to read "ok / healthy".
    make_receipt(session_key="agent:ops:web:c", scope="repair", status="repair_failed")
    make_receipt(session_key="agent:ops:web:d", scope="repair", status="repair_abandoned")
    card = _cards(viewer_client)["ops"]
    assert card["tone"] == "error"
    assert card["links"]["to requeue or acknowledge"][0] == 2
    _assert_every_link_lists_its_count(viewer_client, card)


def test_every_card_link_lists_exactly_its_count_across_agents_and_statuses(viewer_client):
    for status in ("checkpoint_failed", "checkpoint_requeued", "receipt_orphaned", "hash_mismatch"):
        make_receipt(session_key="agent:main:web:e", status=status)
    make_receipt(session_key="agent:main:web:e", status="acknowledged", reason="hash mismatch")
    mentioned = make_receipt(
        session_key="agent:main:web:e", status="flush_appended", reason="content hash mismatch"
    )
    make_receipt(session_key="agent:main:web:e", scope="repair", status="repair_pending")
    make_receipt(session_key="agent:main:web:e", scope="repair", status="repair_abandoned")
    # Another agent's rows must not leak into main's links.
    make_receipt(session_key="agent:ops:web:f", status="checkpoint_failed")
    make_receipt(session_key="agent:ops:web:f", scope="repair", status="repair_pending")
    cards = _cards(viewer_client)
    main = cards["main"]
    assert {label: count for label, (count, _href) in main["links"].items()} == {
        "at risk": 5,  # the one definition: the abandoned repair is at risk too
        "hash mismatch": 1,
        "queued": 1,
        "to requeue or acknowledge": 1,
    }
    assert mentioned.receipt_id in main["links"]["hash mismatch"][1]
    for card in cards.values():
        _assert_every_link_lists_its_count(viewer_client, card)


def test_a_healthy_agent_has_nothing_to_follow(viewer_client):
    make_receipt(session_key="agent:main:web:g", status="checkpoint_saved")
    card = _cards(viewer_client)["main"]
    assert card["tone"] == "ok"
    assert set(card["links"]) == {"queued"}
    assert card["links"]["queued"][0] == 0
    _assert_every_link_lists_its_count(viewer_client, card)


@pytest.mark.parametrize("agent", ["main", "team-ops"])
def test_a_cards_agent_name_opens_the_agents_page(viewer_client, agent):
    # The agent's page holds our health beside the gateway's own verdict; its name on the
    # overview leads there, and the page opens (it once failed on the gateway-keyed health).
    make_receipt(session_key=f"agent:{agent}:web:a", agent_id=agent, status="checkpoint_failed")
    card = _cards(viewer_client)[agent]
    assert card["page"].endswith("?gateway=local")
    page = viewer_client.get(card["page"])
    assert page.status_code == 200
    assert html.escape(agent) in page.content.decode()
