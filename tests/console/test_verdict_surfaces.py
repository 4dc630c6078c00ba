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
from operations_app.models import AlertRule, GatewayLink, GatewayMemoryVerdict
from receipts_app.counts import receipt_counts
from receipts_app.health import hash_mismatches
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
    assert set(states_by_gateway_agent(rows, {}).values()) == {State.OK}
    # A status another change adds to the at-risk group is at risk everywhere at once.
    import receipts_app.verdict as verdict

    monkeypatch.setattr(verdict, "AT_RISK_STATUSES", (*AT_RISK_STATUSES, "made_up_status"))
    assert set(states_by_gateway_agent(rows, {}).values()) == {State.AT_RISK}
    assert REPAIR_QUEUE_STATUSES  # the repairing state's group


# --- health's hash-mismatch heuristic, on every surface --------------------------------------
# A row whose status is in no at-risk group but whose reason names a hash mismatch: the card
# said "at risk" (health's heuristic) while the fleet, /metrics and the alert said otherwise.
# Two gateways, the same agent name: only the gateway with the row is at risk.
FLAGGED, CLEAN = "edge-h", "edge-o"
REASON = "archive hash mismatch: sha256 differs from the manifest"


def _heuristic_ledger(status: str) -> str:
    for gateway in (FLAGGED, CLEAN):
        ensure_gateway(gateway)
        with using_gateway(gateway):
            make_receipt(session_key=KEY, status="checkpoint_saved")
    with using_gateway(FLAGGED):
        row = make_receipt(session_key=KEY, scope="flush", status=status, reason=REASON)
    # Both gateways linked, both saying "ok": the link panel's "here" side is ours.
    for gateway in (FLAGGED, CLEAN):
        link = GatewayLink.objects.create(gateway_id=gateway, state="ok", server_version="0.5.3")
        GatewayMemoryVerdict.objects.create(
            gateway=link, agent_id="ops", answered_at=link.checked_at, memory_safety="ok"
        )
    return row.receipt_id


def _surface_states(client, token: str) -> dict[str, dict[str, str]]:
    """Surface -> gateway -> the state it shows for agent ops on that gateway."""
    out: dict[str, dict[str, str]] = {}
    cards = {m["gateway"]: _state(m["body"])[0] for m in CARD.finditer(client.get("/").text)}
    out["card"] = cards
    out["agent page"] = {
        g: _state(client.get(reverse("agents:detail", args=["ops"]) + f"?gateway={g}").text)[0]
        for g in (FLAGGED, CLEAN)
    }
    fleet = client.get(reverse("receipts:fleet")).text
    out["fleet"] = {
        g: _state(body)[0]
        for g, body in re.findall(r'data-gateway="([\w-]+)"[^>]*>(.*?)</tr>', fleet, re.S)
    }
    api = client.get("/api/v1/gateways", HTTP_AUTHORIZATION=f"Bearer {token}").json()["items"]
    out["gateways API"] = {g["name"]: g["state"] for g in api}
    panel = client.get(reverse("operations:gateway_link")).text
    out["link panel"] = {
        g: _state(body.split('class="here-says"', 1)[1])[0]
        for g, body in re.findall(
            r'<tr class="gateway-verdict[^"]*" data-gateway="([\w-]+)" data-agent="ops">(.*?)</tr>',
            panel,
            re.S,
        )
    }
    metrics = render_metrics().decode()
    out["metrics"] = {
        g: s
        for g, s in re.findall(
            r'opensquilla_memory_state\{agent="ops",gateway="([\w-]+)",state="(\w+)"\} 1\.0',
            metrics,
        )
    }
    rule = AlertRule(name="risk", condition=AlertRule.AT_RISK_AGE, threshold=0.001, channel="email")
    fired = firing_subjects(rule, Snapshot.read(now=10**15))
    out["alert"] = {g: "at_risk" if f"{g}/ops" in fired else "not firing" for g in (FLAGGED, CLEAN)}
    return {
        name: {g: s for g, s in states.items() if g in (FLAGGED, CLEAN)}
        for name, states in out.items()
    }


@pytest.mark.parametrize("status", ["flush_appended", "flush_failed"])
def test_a_hash_mismatch_only_the_heuristic_finds_is_at_risk_on_every_surface(
    viewer_client, read_token, status
):
    receipt_id = _heuristic_ledger(status)
    # flush_failed alone is a queued repair: the heuristic's finding outranks it.
    states = _surface_states(viewer_client, read_token)
    expected = {FLAGGED: "at_risk", CLEAN: "ok"}
    alert = {FLAGGED: "at_risk", CLEAN: "not firing"}
    assert states == {name: (alert if name == "alert" else expected) for name in states}, states

    # The fleet row names the finding the way the card does: a count and a link to the row.
    fleet = viewer_client.get(reverse("receipts:fleet")).text
    rows = dict(re.findall(r'data-gateway="([\w-]+)"[^>]*>(.*?)</tr>', fleet, re.S))
    assert "0 at risk" in rows[FLAGGED]
    link = re.search(r'data-count="hash_mismatches" href="([^"]+)">1 hash mismatch<', rows[FLAGGED])
    assert link, rows[FLAGGED]
    assert receipt_id in html.unescape(link[1])
    assert 'data-count="hash_mismatches"' not in rows[CLEAN]
    api = viewer_client.get("/api/v1/gateways", HTTP_AUTHORIZATION=f"Bearer {read_token}").json()
    found = {g["name"]: g["hash_mismatches"] for g in api["items"]}
    assert found[CLEAN] == {"count": 0, "filter": None}
    listed = viewer_client.get(
        "/api/v1/receipts", found[FLAGGED]["filter"], HTTP_AUTHORIZATION=f"Bearer {read_token}"
    ).json()["items"]
    assert [r["receipt_id"] for r in listed] == [receipt_id]

    metrics = render_metrics().decode()
    assert f'opensquilla_memory_hash_mismatches{{agent="ops",gateway="{FLAGGED}"}} 1.0' in metrics
    assert f'opensquilla_memory_hash_mismatches{{agent="ops",gateway="{CLEAN}"}} 0.0' in metrics
    rule = AlertRule(name="risk", condition=AlertRule.AT_RISK_AGE, threshold=0.001, channel="email")
    (firing,) = firing_subjects(rule, Snapshot.read(now=10**15)).values()
    assert "(0 at risk, 1 hash mismatch)" in firing.summary


def test_a_retired_row_naming_a_hash_mismatch_is_at_risk_nowhere(viewer_client, read_token):
    """Retired by its gateway's upgrade (0.5.5+), it left the backlog and the at-risk counts;
    the heuristic leaves it out too, index and all."""
    _heuristic_ledger("retired_upstream")
    states = _surface_states(viewer_client, read_token)
    alert = {FLAGGED: "not firing", CLEAN: "not firing"}
    everywhere_ok = {FLAGGED: "ok", CLEAN: "ok"}
    assert states == {name: (alert if name == "alert" else everywhere_ok) for name in states}, (
        states
    )
    assert hash_mismatches() == {}
    (card,) = [
        m["body"] for m in CARD.finditer(viewer_client.get("/").text) if m["gateway"] == FLAGGED
    ]
    assert "hash mismatch" not in card
