"""The API speaks gateway: ``GET /gateways``, ``?gateway=`` on receipts and sessions routes,
and every receipt and session says which gateway it belongs to."""

from __future__ import annotations

import pytest

from sessions_app.gateways import ensure_gateway, using_gateway
from tests.factories import make_receipt, make_session

from .conftest import assert_error

pytestmark = pytest.mark.django_db

KEY = "agent:main:webchat:default"


@pytest.fixture
def overlapping():
    """One key in ``local`` and in ``edge``; a failed checkpoint in edge only."""
    ensure_gateway("edge", opensquilla_version="0.3.0", schema_version="V014")
    local = make_session(KEY, messages=1)
    mine = make_receipt(session_key=KEY, session_id=local.session_id, idempotency_key="k")
    with using_gateway("edge"):
        edge = make_session(KEY, messages=2)
        theirs = make_receipt(
            session_key=KEY,
            session_id=edge.session_id,
            idempotency_key="k",
            status="checkpoint_failed",
        )
    return local, edge, mine, theirs


def test_lists_span_every_gateway_and_say_which_each_row_is_in(reader, overlapping):
    local, edge, mine, theirs = overlapping
    items = reader.get("/receipts").json()["items"]
    assert {(r["receipt_id"], r["gateway"]) for r in items} == {
        (mine.receipt_id, "local"),
        (theirs.receipt_id, "edge"),
    }
    sessions = reader.get("/sessions").json()["items"]
    assert sorted((s["gateway"], s["session_id"]) for s in sessions) == sorted(
        [("local", local.session_id), ("edge", edge.session_id)]
    )
    only_edge = reader.get("/receipts", {"gateway": "edge"}).json()["items"]
    assert [r["receipt_id"] for r in only_edge] == [theirs.receipt_id]
    only_edge_sessions = reader.get("/sessions", {"gateway": "edge"}).json()["items"]
    assert [s["session_id"] for s in only_edge_sessions] == [edge.session_id]


def test_a_session_key_addresses_local_unless_a_gateway_is_named(reader, overlapping):
    local, edge, _mine, _theirs = overlapping
    plain = reader.get(f"/sessions/{KEY}").json()
    assert (plain["gateway"], plain["session_id"]) == ("local", local.session_id)
    named = reader.get(f"/sessions/{KEY}", {"gateway": "edge"}).json()
    assert (named["gateway"], named["session_id"]) == ("edge", edge.session_id)
    transcript = reader.get(f"/sessions/{KEY}/transcript", {"gateway": "edge"}).json()["items"]
    assert len(transcript) == 2
    assert len(reader.get(f"/sessions/{KEY}/transcript").json()["items"]) == 1


def test_a_receipt_id_is_global_but_a_named_gateway_must_hold_it(reader, overlapping):
    _local, _edge, _mine, theirs = overlapping
    assert reader.get(f"/receipts/{theirs.receipt_id}").json()["gateway"] == "edge"
    assert reader.get(f"/receipts/{theirs.receipt_id}", {"gateway": "edge"}).status_code == 200
    assert_error(
        reader.get(f"/receipts/{theirs.receipt_id}", {"gateway": "local"}), 404, "not_found"
    )


def test_writes_go_to_the_named_gateway(operator, overlapping):
    _local, edge, mine, _theirs = overlapping
    body = {
        "session_key": KEY,
        "session_id": edge.session_id,
        "scope": "checkpoint",
        "idempotency_key": "k",
        "status": "checkpoint_saved",
    }
    response = operator.put("/receipts?gateway=edge", body)
    assert response.status_code == 200, response.content
    assert response.json()["gateway"] == "edge"
    assert response.json()["receipt_id"] != mine.receipt_id  # edge's own row under key k
    created = operator.post("/sessions?gateway=edge", {"session_key": "agent:main:new"})
    assert created.status_code == 201 and created.json()["gateway"] == "edge"


def test_unknown_gateway_is_404_and_a_bad_name_422(reader, anonymous, overlapping):
    body = assert_error(reader.get("/receipts", {"gateway": "nowhere"}), 404, "not_found")
    assert "nowhere" in body["detail"]
    assert_error(reader.get(f"/sessions/{KEY}", {"gateway": "nowhere"}), 404, "not_found")
    assert_error(reader.get("/sessions", {"gateway": "Not A Slug"}), 422, "validation_error")
    # Without credentials nothing is said about gateways.
    assert anonymous.get("/receipts", {"gateway": "nowhere"}).status_code == 401


def test_the_gateway_list_has_versions_and_at_risk_counts_with_their_filters(reader, overlapping):
    items = {g["name"]: g for g in reader.get("/gateways").json()["items"]}
    assert set(items) == {"local", "edge"}
    edge = items["edge"]
    assert (edge["opensquilla_version"], edge["schema_version"]) == ("0.3.0", "V014")
    assert edge["receipts"] == 1 and items["local"]["receipts"] == 1
    errors = edge["at_risk"]["memory_safety_errors"]
    assert errors["count"] == 1 and items["local"]["at_risk"]["memory_safety_errors"]["count"] == 0
    listed = reader.get("/receipts", errors["filter"]).json()["items"]
    assert [r["status"] for r in listed] == ["checkpoint_failed"]
    assert {r["gateway"] for r in listed} == {"edge"}
    # Memory at risk, the overview card's one count, for the gateway alone.
    at_risk = edge["at_risk"]["memory_at_risk"]
    assert at_risk["count"] == 1 and items["local"]["at_risk"]["memory_at_risk"]["count"] == 0
    listed = reader.get("/receipts", at_risk["filter"]).json()["items"]
    assert [(r["status"], r["gateway"]) for r in listed] == [("checkpoint_failed", "edge")]
    one = reader.get("/gateways", {"gateway": "edge"}).json()["items"]
    assert [g["name"] for g in one] == ["edge"]


def test_the_gateway_list_costs_the_same_queries_for_ten_gateways(reader, overlapping):
    """No query per gateway: the fleet grows, the list's query count does not."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as two:
        assert reader.get("/gateways").status_code == 200
    for n in range(8):
        name = f"edge-{n}"
        ensure_gateway(name)
        with using_gateway(name):
            make_receipt(session_key=KEY, idempotency_key="k", status="checkpoint_failed")
    with CaptureQueriesContext(connection) as ten:
        items = reader.get("/gateways").json()["items"]
    assert len(items) == 10

    def reads(ctx):  # a token's last_used_at bookkeeping is throttled by time, not by gateways
        return [q for q in ctx.captured_queries if "apitoken" not in q["sql"].lower()]

    # gateways, counts, mirror, retired receipts (receipts_app.handover)
    assert len(reads(ten)) == len(reads(two)) <= 5
