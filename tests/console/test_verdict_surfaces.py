"""One state per (gateway, agent), in one set of words, on every surface.

The walk found "Memory safety: ok · 1 at risk" on a card whose only trouble was a repair given
up. Here the same ledger is read through every surface that states an agent's memory (the
overview's card, the fleet row, the agent page, the gateways API, ``/metrics``, the at-risk
alert), and each must say the same state, never "ok" beside a count at risk.
"""

from __future__ import annotations

import html
import re

import pytest
from django.urls import reverse

from opensquilla_site.tokens import create_api_token
from operations_app.alerts.conditions import Snapshot, firing_subjects
from operations_app.metrics import render_metrics
from operations_app.models import AlertRule
from receipts_app.counts import receipt_counts
from receipts_app.statuses import AT_RISK_STATUSES, REPAIR_QUEUE_STATUSES
from receipts_app.verdict import LABELS, State, states_by_gateway_agent
from sessions_app.gateways import ensure_gateway, using_gateway
from tests.factories import make_receipt, make_user

pytestmark = pytest.mark.django_db

KEY = "agent:ops:webchat:default"
# The cases the walk met, and one of each state: gateway -> (statuses of agent ops's rows, state)
CASES = {
    "edge-c": (["repair_abandoned", "checkpoint_saved"], State.AT_RISK),  # a repair given up
    "edge-d": (["repair_pending", "checkpoint_saved"], State.REPAIRING),
    "edge-e": (["checkpoint_saved"], State.OK),
}
CARD = re.compile(
    r'<article class="card health-\w+">\s*<h2>Agent <a [^>]*><code>ops</code></a>'
    r' <span class="[^"]*" title="gateway">@(?P<gateway>[\w-]+)</span></h2>(?P<body>.*?)</article>',
    re.S,
)
STATE = re.compile(r'class="badge verdict [^"]*" data-state="(?P<state>\w+)">(?P<label>[^<]+)<')


@pytest.fixture
def read_token() -> str:
    _token, plaintext = create_api_token(
        user=make_user("scraper", "viewer"), name="p", scope="read"
    )
    return plaintext


@pytest.fixture
def ledger():
    for gateway, (statuses, _state) in CASES.items():
        ensure_gateway(gateway)
        with using_gateway(gateway):
            for status in statuses:
                scope = "repair" if status.startswith("repair") else "checkpoint"
                make_receipt(session_key=KEY, scope=scope, status=status)


def _state(fragment: str) -> tuple[str, str]:
    found = STATE.search(fragment)
    assert found, fragment[:400]
    return found["state"], html.unescape(found["label"])


def test_every_surface_says_the_same_state_for_the_same_agent(ledger, viewer_client, read_token):
    expected = {g: (s.value, LABELS[s]) for g, (_rows, s) in CASES.items()}

    cards = {m["gateway"]: _state(m["body"]) for m in CARD.finditer(viewer_client.get("/").text)}
    assert cards == expected

    fleet = viewer_client.get(reverse("receipts:fleet")).text
    rows = re.findall(r'data-gateway="([\w-]+)"[^>]*>(.*?)</tr>', fleet, re.S)
    assert {g: _state(body) for g, body in rows if g in CASES} == expected

    pages = {
        g: _state(viewer_client.get(reverse("agents:detail", args=["ops"]) + f"?gateway={g}").text)
        for g in CASES
    }
    assert pages == expected

    api = viewer_client.get("/api/v1/gateways", HTTP_AUTHORIZATION=f"Bearer {read_token}")
    assert api.status_code == 200, api.content
    assert {
        g["name"]: (g["state"], g["state_label"]) for g in api.json()["items"] if g["name"] in CASES
    } == expected

    metrics = render_metrics().decode()
    for gateway, (state, _label) in expected.items():
        for other in ("at_risk", "repairing", "ok"):
            line = f'opensquilla_memory_state{{agent="ops",gateway="{gateway}",state="{other}"}}'
            assert f"{line} {1.0 if other == state else 0.0}" in metrics

    rule = AlertRule(name="risk", condition=AlertRule.AT_RISK_AGE, threshold=0.001, channel="email")
    fired = firing_subjects(rule, Snapshot.read(now=10**15))
    at_risk = {g for g, (s, _l) in expected.items() if s == "at_risk"}
    assert {subject.split("/")[0] for subject in fired} & set(CASES) == at_risk
    assert all(": at risk for " in f.summary for f in fired.values())


def test_no_card_says_ok_beside_a_count_at_risk(viewer_client):
    # Every at-risk status alone makes the card "at risk" (the groups, not a list of ours).
    for i, status in enumerate(AT_RISK_STATUSES):
        make_receipt(session_key=f"agent:a{i}:web:x", agent_id=f"a{i}", status=status)
    body = viewer_client.get("/").text
    cards = re.findall(r'<article class="card[^"]*">(.*?)</article>', body, re.S)
    assert len(cards) == len(AT_RISK_STATUSES)
    for card in cards:
        assert _state(card) == ("at_risk", "at risk"), card
        assert ">ok<" not in card


def test_states_come_from_the_named_groups(monkeypatch):
    make_receipt(session_key=KEY, status="checkpoint_saved")
    make_receipt(session_key=KEY, status="made_up_status")
    rows = receipt_counts()
    assert set(states_by_gateway_agent(rows).values()) == {State.OK}
    # A status another change adds to the at-risk group is at risk everywhere at once.
    import receipts_app.verdict as verdict

    monkeypatch.setattr(verdict, "AT_RISK_STATUSES", (*AT_RISK_STATUSES, "made_up_status"))
    assert set(states_by_gateway_agent(rows).values()) == {State.AT_RISK}
    assert REPAIR_QUEUE_STATUSES  # the repairing state's group
