"""Idempotency-Key: a retried acting POST returns the first result and does no work twice."""

from __future__ import annotations

import pytest
from django.test import Client

from opensquilla_site.models import IdempotentRequest
from opensquilla_site.tokens import create_api_token
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent, RequeuePlan
from sessions_app.models import TranscriptEntry
from tests.api.conftest import ApiCaller, assert_error
from tests.factories import make_receipt, make_session, make_user

pytestmark = pytest.mark.django_db

KEY = "agent:main:webchat:idem"


def test_retried_append_returns_the_first_entry_and_appends_once(operator):
    make_session(KEY)
    headers = {"Idempotency-Key": "append-1"}
    first = operator.post(
        f"/sessions/{KEY}/messages", {"role": "user", "content": "hi"}, headers=headers
    )
    retry = operator.post(
        f"/sessions/{KEY}/messages", {"role": "user", "content": "hi"}, headers=headers
    )
    assert first.status_code == retry.status_code == 201
    assert retry.json() == first.json()
    assert TranscriptEntry.objects.count() == 1


def test_without_a_key_every_call_acts(operator):
    make_session(KEY)
    operator.post(f"/sessions/{KEY}/messages", {"role": "user", "content": "hi"})
    operator.post(f"/sessions/{KEY}/messages", {"role": "user", "content": "hi"})
    assert TranscriptEntry.objects.count() == 2


def test_retried_requeue_records_one_action(operator):
    row = make_receipt(scope="repair", status="repair_failed")
    headers = {"Idempotency-Key": "rq-1"}
    first = operator.post(f"/receipts/{row.receipt_id}/requeue", {"reason": "go"}, headers=headers)
    retry = operator.post(f"/receipts/{row.receipt_id}/requeue", {"reason": "go"}, headers=headers)
    assert first.json()["outcome"] == "requeued"
    assert retry.json() == first.json(), "the retry sees the first outcome, not in_flight"
    assert ReceiptEvent.objects.filter(receipt_id=row.receipt_id, action="requeue").count() == 1


def test_retried_plan_creation_creates_one_plan(operator):
    make_receipt(scope="repair", status="repair_failed")
    headers = {"Idempotency-Key": "plan-1"}
    body = {"filters": {"status": "repair_failed"}}
    first = operator.post("/requeue-plans", body, headers=headers).json()
    retry = operator.post("/requeue-plans", body, headers=headers).json()
    assert first["plan_id"] == retry["plan_id"]
    assert RequeuePlan.objects.count() == 1


def test_retried_bulk_and_session_create(operator):
    rows = {
        "receipts": [
            {
                "session_key": "agent:main:x",
                "session_id": "g",
                "scope": "flush",
                "idempotency_key": "b1",
                "status": "flush_appended",
            }
        ]
    }
    headers = {"Idempotency-Key": "bulk-1"}
    assert operator.post("/receipts/bulk", rows, headers=headers).status_code == 200
    assert operator.post("/receipts/bulk", rows, headers=headers).status_code == 200
    assert MemoryDurableReceipt.objects.count() == 1

    created = operator.post("/sessions", {"session_key": KEY}, headers={"Idempotency-Key": "s1"})
    replay = operator.post("/sessions", {"session_key": KEY}, headers={"Idempotency-Key": "s1"})
    assert created.status_code == replay.status_code == 201, "a replay is not a 409 conflict"
    assert_error(operator.post("/sessions", {"session_key": KEY}), 409, "conflict")


def test_a_key_reused_on_another_path_is_422(operator):
    make_session(KEY)
    headers = {"Idempotency-Key": "shared"}
    operator.post(f"/sessions/{KEY}/messages", {"role": "user", "content": "a"}, headers=headers)
    body = assert_error(
        operator.post(f"/sessions/{KEY}/reset", headers=headers), 422, "idempotency_key_reused"
    )
    assert "messages" in body["detail"]
    assert operator.get(f"/sessions/{KEY}").json()["epoch"] == 0, "the reset did not run"


def test_keys_are_private_to_a_token(operator):
    make_session(KEY)
    user = make_user("other", "operator")
    _t, plaintext = create_api_token(user=user, name="other", scope="operate")
    other = ApiCaller(Client(), plaintext)
    headers = {"Idempotency-Key": "same"}
    operator.post(f"/sessions/{KEY}/messages", {"role": "user", "content": "a"}, headers=headers)
    other.post(f"/sessions/{KEY}/messages", {"role": "user", "content": "b"}, headers=headers)
    assert TranscriptEntry.objects.count() == 2


def test_a_failed_call_is_not_stored_so_a_retry_acts(operator):
    headers = {"Idempotency-Key": "retry-after-error"}
    assert_error(
        operator.post(
            f"/sessions/{KEY}/messages", {"role": "user", "content": "a"}, headers=headers
        ),
        404,
        "not_found",
    )
    make_session(KEY)
    ok = operator.post(
        f"/sessions/{KEY}/messages", {"role": "user", "content": "a"}, headers=headers
    )
    assert ok.status_code == 201
    assert TranscriptEntry.objects.count() == 1


def test_a_call_still_running_is_409(operator):
    make_session(KEY)
    IdempotentRequest.objects.create(
        key="busy",
        token_digest=operator_digest(operator),
        method="POST",
        path=f"/api/v1/sessions/{KEY}/reset",
        status_code=0,
        response_body={},
    )
    assert_error(
        operator.post(f"/sessions/{KEY}/reset", headers={"Idempotency-Key": "busy"}),
        409,
        "idempotency_in_progress",
    )


def test_bad_keys_are_422(operator):
    make_session(KEY)
    for bad in ["x" * 256, "tab\tkey"]:
        assert_error(
            operator.post(f"/sessions/{KEY}/reset", headers={"Idempotency-Key": bad}),
            422,
            "validation_error",
        )


def operator_digest(caller: ApiCaller) -> str:
    from opensquilla_site.tokens import authenticate_token

    token = authenticate_token(caller.token or "")
    assert token is not None
    return token.digest


def test_token_creation_is_never_replayed_so_no_secret_is_stored(admin):
    headers = {"Idempotency-Key": "tok-1"}
    first = admin.post("/tokens", {"name": "a", "scope": "read"}, headers=headers).json()
    second = admin.post("/tokens", {"name": "a", "scope": "read"}, headers=headers).json()
    assert first["token"] != second["token"]
    stored = [str(r.response_body) for r in IdempotentRequest.objects.all()]
    assert not any(first["token"] in body or second["token"] in body for body in stored)
