"""The console and gateways: ``?gateway=`` in the URL filters every list and addresses a
session of that gateway; every page says which gateway a row belongs to."""

from __future__ import annotations

import pytest

from receipts_app.models import RequeuePlan
from sessions_app.gateways import ensure_gateway, using_gateway
from tests.factories import make_receipt, make_session

pytestmark = pytest.mark.django_db

KEY = "agent:main:webchat:default"


@pytest.fixture
def overlapping():
    ensure_gateway("edge")
    local = make_session(KEY, messages=1)
    mine = make_receipt(
        session_key=KEY,
        session_id=local.session_id,
        status="checkpoint_failed",
        reason="local disk",
    )
    with using_gateway("edge"):
        edge = make_session(KEY, messages=2)
        theirs = make_receipt(
            session_key=KEY,
            session_id=edge.session_id,
            status="checkpoint_failed",
            reason="edge disk",
        )
    return local, edge, mine, theirs


def test_the_receipts_list_spans_gateways_and_filters_by_one(viewer_client, overlapping):
    _local, _edge, mine, theirs = overlapping
    page = viewer_client.get("/receipts/").content.decode()
    assert mine.receipt_id in page and theirs.receipt_id in page
    assert "@edge" in page  # the other gateway's row says so
    assert f"/sessions/s/{KEY}?gateway=edge" in page  # and links to its own session
    only = viewer_client.get("/receipts/?gateway=edge").content.decode()
    assert theirs.receipt_id in only and mine.receipt_id not in only


def test_a_session_page_shows_the_named_gateways_session(viewer_client, overlapping):
    local, edge, _mine, _theirs = overlapping
    plain = viewer_client.get(f"/sessions/s/{KEY}").content.decode()
    assert local.session_id in plain and edge.session_id not in plain
    named = viewer_client.get(f"/sessions/s/{KEY}?gateway=edge").content.decode()
    assert edge.session_id in named and local.session_id not in named
    assert "Gateway <a" in named and "?gateway=edge" in named  # the memory panel follows it
    panel = viewer_client.get(f"/session-memory/?key={KEY}&gateway=edge").content.decode()
    assert "edge disk" not in panel  # checkpoints list: the failed one is edge's own row
    listed = viewer_client.get("/sessions/?gateway=edge").content.decode()
    assert edge.session_id[:8] in listed and local.session_id[:8] not in listed


def test_the_receipt_page_names_its_gateway(viewer_client, overlapping):
    _local, _edge, _mine, theirs = overlapping
    page = viewer_client.get(f"/receipts/{theirs.receipt_id}/").content.decode()
    assert "<dt>gateway</dt><dd>" in page and "?gateway=edge" in page


def test_a_bad_gateway_name_is_a_message(viewer_client, overlapping):
    response = viewer_client.get(f"/sessions/s/{KEY}?gateway=Not%20A%20Slug")
    assert response.status_code == 400
    assert "is not a slug" in response.content.decode()


def test_a_plan_freezes_its_gateway_with_its_filter(operator_client, overlapping):
    _local, _edge, mine, theirs = overlapping
    response = operator_client.post(
        "/plans/new/",
        {"status": "checkpoint_failed", "gateway": "edge", "all_matching": "1"},
    )
    assert response.status_code in (200, 302), response.content[:500]
    plan = RequeuePlan.objects.get()
    assert plan.filters.get("gateway") == "edge"
    assert plan.total == 1


def test_a_receipt_page_relates_only_its_own_gateways_rows(viewer_client, overlapping):
    """Gateways repeat each other's keys, so a family read by key alone mixed them."""
    local, edge, _mine, _theirs = overlapping
    family = f"checkpoint:{KEY}:turn-7:"
    ours = make_receipt(
        session_key=KEY,
        session_id=local.session_id,
        turn_id="turn-7",
        idempotency_key=family + "failed:a",
        status="checkpoint_failed",
    )
    kin = make_receipt(
        session_key=KEY,
        session_id=local.session_id,
        turn_id="turn-7",
        idempotency_key=family + "b",
        status="checkpoint_saved",
    )
    with using_gateway("edge"):
        stranger = make_receipt(
            session_key=KEY,
            session_id=edge.session_id,
            turn_id="turn-7",
            idempotency_key=family + "c",
            status="checkpoint_saved",
        )
    page = viewer_client.get(f"/receipts/{ours.receipt_id}/").content.decode()
    assert kin.receipt_id in page
    assert stranger.receipt_id not in page
