"""Receipts over the API: upsert, bulk, list with every filter, get, patch, events."""

from __future__ import annotations

import json

import pytest

from receipts_app.models import MemoryDurableReceipt, ReceiptEvent
from sessions_app import services as session_services
from tests.api.conftest import assert_error
from tests.factories import make_receipt, make_session

pytestmark = pytest.mark.django_db


def receipt_body(**overrides):
    body = {
        "session_key": "agent:main:webchat:abc",
        "session_id": "gen-1",
        "turn_id": "t1",
        "scope": "checkpoint",
        "idempotency_key": "checkpoint:agent:main:webchat:abc:t1:h",
        "status": "checkpoint_failed",
        "reason": "disk full",
        "attempt_count": 1,
    }
    body.update(overrides)
    return body


def test_upsert_inserts_then_updates_keeping_receipt_id_and_created_at(operator):
    first = operator.put("/receipts", receipt_body(created_at=1_000))
    assert first.status_code == 200
    stored = first.json()
    assert stored["created_at"] == 1_000 and stored["agent_id"] == "main"

    second = operator.put(
        "/receipts", receipt_body(status="checkpoint_saved", reason=None, receipt_id="other")
    )
    again = second.json()
    assert again["receipt_id"] == stored["receipt_id"]
    assert again["created_at"] == 1_000
    assert again["status"] == "checkpoint_saved"
    assert MemoryDurableReceipt.objects.count() == 1
    # The status change is on the audit timeline, attributed to the API caller.
    event = ReceiptEvent.objects.get(receipt_id=stored["receipt_id"], action="status_change")
    assert event.surface == "api" and event.actor.startswith("operator")


def test_upsert_with_expected_session_id_is_fenced_on_the_live_generation(operator):
    session = make_session("agent:main:webchat:fence")
    body = receipt_body(session_key=session.session_key, session_id=session.session_id)
    ok = operator.put("/receipts", {**body, "expected_session_id": session.session_id})
    assert ok.status_code == 200

    session_services.reset_session(session.session_key)
    stale = operator.put(
        "/receipts",
        {**body, "idempotency_key": "k2", "expected_session_id": session.session_id},
    )
    assert_error(stale, 409, "generation_changed")
    assert not MemoryDurableReceipt.objects.filter(idempotency_key="k2").exists()


@pytest.mark.parametrize(
    "bad",
    [
        {"status": ""},
        {"idempotency_key": None},
        {"attempt_count": -1},
        {"attempt_count": 2**40},
        {"next_retry_at_ms": 10**19},
        {"reason": "bad\x00byte"},
        {"unknown_column": 1},
        {"scope": "x" * 65},
    ],
)
def test_upsert_rejects_invalid_rows_with_422(operator, bad):
    assert_error(operator.put("/receipts", receipt_body(**bad)), 422, "validation_error")
    assert not MemoryDurableReceipt.objects.exists()


def test_malformed_json_is_400(operator):
    assert_error(operator.put("/receipts", raw="{not json"), 400, "invalid_json")


def test_body_over_two_mebibytes_is_413(operator):
    huge = receipt_body(reason="x" * (2 * 1024 * 1024 + 10))
    body = assert_error(operator.put("/receipts", huge), 413, "payload_too_large")
    assert body["limit_bytes"] == 2 * 1024 * 1024


def test_bulk_upserts_in_one_transaction_with_a_result_per_row(operator):
    existing = make_receipt(idempotency_key="bulk:0", status="repair_pending")
    rows = [receipt_body(idempotency_key=f"bulk:{i}", status="repair_failed") for i in range(3)]
    response = operator.post("/receipts/bulk", {"receipts": rows})
    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 3
    assert [r["index"] for r in body["results"]] == [0, 1, 2]
    assert body["results"][0]["receipt"]["receipt_id"] == existing.receipt_id
    assert {r["receipt"]["status"] for r in body["results"]} == {"repair_failed"}
    assert MemoryDurableReceipt.objects.count() == 3


def test_bulk_is_all_or_nothing(operator):
    rows = [receipt_body(idempotency_key=f"ok:{i}") for i in range(3)]
    rows.append(receipt_body(idempotency_key=""))
    assert_error(operator.post("/receipts/bulk", {"receipts": rows}), 422, "validation_error")
    assert not MemoryDurableReceipt.objects.exists()


def test_bulk_over_1000_rows_is_refused_clearly(operator):
    rows = [receipt_body(idempotency_key=f"k{i}") for i in range(1001)]
    body = assert_error(
        operator.post("/receipts/bulk", {"receipts": rows}), 422, "validation_error"
    )
    assert "1000" in json.dumps(body["detail"])
    assert not MemoryDurableReceipt.objects.exists()


def test_bulk_accepts_bodies_over_the_default_limit_up_to_its_own(operator):
    filler = "r" * 3000
    rows = [receipt_body(idempotency_key=f"big:{i}", reason=filler) for i in range(1000)]
    payload = json.dumps({"receipts": rows})
    assert 2 * 1024 * 1024 < len(payload) < 8 * 1024 * 1024
    assert operator.post("/receipts/bulk", raw=payload).status_code == 200
    assert MemoryDurableReceipt.objects.count() == 1000


def test_bulk_body_over_eight_mebibytes_is_413(operator):
    rows = [receipt_body(idempotency_key=f"k{i}", reason="z" * 9000) for i in range(1000)]
    assert_error(operator.post("/receipts/bulk", {"receipts": rows}), 413, "payload_too_large")


def test_get_and_404(reader):
    row = make_receipt()
    assert (
        reader.get(f"/receipts/{row.receipt_id}").json()["idempotency_key"] == row.idempotency_key
    )
    assert_error(reader.get("/receipts/does-not-exist"), 404, "not_found")


def test_patch_updates_named_columns_and_records_the_change(operator):
    row = make_receipt(status="repair_failed")
    response = operator.patch(
        f"/receipts/{row.receipt_id}", {"status": "repair_pending", "next_retry_at_ms": 5}
    )
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "repair_pending" and body["next_retry_at_ms"] == 5
    assert body["reason"] == row.reason, "columns not sent are untouched"
    assert ReceiptEvent.objects.filter(
        receipt_id=row.receipt_id, to_status="repair_pending", surface="api"
    ).exists()


def test_patch_errors(operator):
    row = make_receipt()
    assert_error(
        operator.patch(f"/receipts/{row.receipt_id}", {"color": "red"}), 422, "validation_error"
    )
    assert_error(
        operator.patch(f"/receipts/{row.receipt_id}", {"status": None}), 422, "validation_error"
    )
    assert_error(
        operator.patch(f"/receipts/{row.receipt_id}", {"created_at": 1}), 422, "validation_error"
    )
    assert_error(operator.patch("/receipts/nope", {"status": "x"}), 404, "not_found")
    other = make_receipt()
    # Taking another row's idempotency key would break the ledger's one invariant.
    assert_error(
        operator.patch(f"/receipts/{row.receipt_id}", {"idempotency_key": other.idempotency_key}),
        409,
        "conflict",
    )


def test_events_list_the_timeline_oldest_first(operator):
    row = make_receipt(status="repair_failed")
    operator.patch(f"/receipts/{row.receipt_id}", {"status": "repair_pending"})
    operator.patch(f"/receipts/{row.receipt_id}", {"status": "repair_done"})
    events = operator.get(f"/receipts/{row.receipt_id}/events").json()["items"]
    assert [(e["from_status"], e["to_status"]) for e in events] == [
        ("repair_failed", "repair_pending"),
        ("repair_pending", "repair_done"),
    ]


# --- list -----------------------------------------------------------------------------------


def test_list_pages_newest_first_with_a_stable_cursor(reader):
    ids = [make_receipt(created_at=1000 + i // 2).receipt_id for i in range(7)]  # ties on purpose
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        page = reader.get("/receipts", params).json()
        seen += [r["receipt_id"] for r in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))


def test_list_filters(reader):
    a = make_receipt(
        session_key="agent:ops:web:1",
        status="checkpoint_failed",
        scope="checkpoint",
        reason="Disk Full",
        attempt_count=3,
        created_at=100,
    )
    b = make_receipt(
        session_key="agent:main:web:2",
        status="repair_failed",
        scope="repair",
        created_at=200,
        attempt_count=0,
    )
    c = make_receipt(
        session_key="agent:main:web:3",
        status="repair_pending",
        scope="repair",
        next_retry_at_ms=None,
        created_at=300,
    )
    make_receipt(
        session_key="agent:main:web:4",
        status="repair_pending",
        scope="repair",
        next_retry_at_ms=10**14,
        created_at=400,
    )

    def ids(**params):
        response = reader.get("/receipts", params)
        assert response.status_code == 200, response.content
        return {r["receipt_id"] for r in response.json()["items"]}

    assert ids(status="checkpoint_failed,repair_failed") == {a.receipt_id, b.receipt_id}
    assert ids(status=["checkpoint_failed", "repair_failed"]) == {a.receipt_id, b.receipt_id}
    assert ids(scope="checkpoint") == {a.receipt_id}
    assert ids(agent="OPS") == {a.receipt_id}
    assert ids(session_key="agent:main:web:2") == {b.receipt_id}
    assert ids(session_key_prefix="agent:ops:") == {a.receipt_id}
    assert ids(session_id=a.session_id, scope="checkpoint") == {a.receipt_id}
    assert ids(idempotency_key=b.idempotency_key) == {b.receipt_id}
    assert ids(reason="disk full") == {a.receipt_id}
    assert ids(created_from=150, created_to=300) == {b.receipt_id, c.receipt_id}
    assert ids(attempts_min=3) == {a.receipt_id}
    assert ids(attempts_max=0, scope="repair", created_to=250) == {b.receipt_id}
    assert c.receipt_id in ids(due="true", status="repair_pending")
    assert len(ids(due="true", status="repair_pending")) == 1
    assert ids(receipt_id=[a.receipt_id, c.receipt_id]) == {a.receipt_id, c.receipt_id}
    assert ids(updated_from=0, status="repair_failed") == {b.receipt_id}


@pytest.mark.parametrize(
    "params",
    [
        {"limit": 0},
        {"limit": 501},
        {"cursor": "%%%"},
        {"created_from": "yesterday"},
        {"due": "maybe"},
        {"created_from": -1},
    ],
)
def test_list_rejects_bad_parameters_with_422(reader, params):
    assert_error(reader.get("/receipts", params), 422, "validation_error")


@pytest.mark.parametrize("size", [3, 40])
def test_list_receipts_query_count_does_not_grow_with_the_page(
    reader, django_assert_num_queries, size
):
    for _ in range(size):
        make_receipt()
    reader.get("/receipts")  # the token's last_used_at is written at most once a minute
    with django_assert_num_queries(2):  # token lookup, then one page query
        response = reader.get("/receipts", {"limit": 500, "status": "checkpoint_saved"})
    assert len(response.json()["items"]) == size


@pytest.mark.parametrize("size", [2, 20])
def test_list_events_query_count_does_not_grow_with_the_page(
    operator, django_assert_num_queries, size
):
    row = make_receipt(status="a0")
    for i in range(size):
        operator.patch(f"/receipts/{row.receipt_id}", {"status": f"a{i + 1}"})
    with django_assert_num_queries(2):
        response = operator.get(f"/receipts/{row.receipt_id}/events")
    assert len(response.json()["items"]) == size
