"""Every /api/ answer keeps the error contract, whatever arrives on the wire.

Ids the API accepts are addressable; a reused Idempotency-Key with another body is refused;
deeply nested JSON, a wrong method, a missing CSRF token, an oversized or chunked body and a
non-JSON Content-Type each get a JSON ``{detail, code}`` with the right status, never a 500 or
an HTML page.
"""

from __future__ import annotations

import json
from io import BytesIO

import pytest
from django.test import Client

from receipts_app.models import MemoryDurableReceipt, RequeuePlan
from tests.api.conftest import API, assert_error
from tests.factories import make_receipt, make_user

pytestmark = pytest.mark.django_db


def _receipt(**overrides):
    body = {
        "session_key": "agent:main:webchat:contract",
        "session_id": "contract-session",
        "scope": "checkpoint",
        "idempotency_key": "contract:1",
        "status": "checkpoint_saved",
    }
    return {**body, **overrides}


# --- item 5: every accepted id is addressable --------------------------------------------------


@pytest.mark.parametrize("receipt_id", ["slash/only", "/", "a/b/requeue"])
def test_a_receipt_id_no_url_can_address_is_refused_naming_the_rule(operator, receipt_id):
    body = assert_error(
        operator.put("/receipts", _receipt(receipt_id=receipt_id)), 422, "validation_error"
    )
    assert "receipt_id" in json.dumps(body["detail"])
    assert "must not contain '/'" in json.dumps(body["detail"])
    assert not MemoryDurableReceipt.objects.exists()


def test_a_bulk_row_with_a_slashed_id_refuses_the_whole_batch(operator):
    rows = [_receipt(idempotency_key="ok:1"), _receipt(idempotency_key="ok:2", receipt_id="x/y")]
    body = assert_error(
        operator.post("/receipts/bulk", {"receipts": rows}), 422, "validation_error"
    )
    assert "must not contain '/'" in json.dumps(body["detail"])
    assert not MemoryDurableReceipt.objects.exists()


@pytest.mark.parametrize("receipt_id", ["dots.and spaces", "hash#1", "quote'\"", "per%cent", ".."])
def test_every_id_the_api_accepts_answers_on_its_own_url(operator, receipt_id):
    from urllib.parse import quote

    stored = operator.put("/receipts", _receipt(receipt_id=receipt_id))
    assert stored.status_code == 200, stored.content
    url = f"/receipts/{quote(receipt_id, safe='')}"
    fetched = operator.get(url)
    assert fetched.status_code == 200, fetched.content
    assert fetched.json()["receipt_id"] == receipt_id
    assert operator.get(f"{url}/events").status_code == 200


# --- item 15: a reused Idempotency-Key with a different body ------------------------------------


def test_a_reused_idempotency_key_with_another_body_is_a_422_and_does_nothing(operator):
    make_receipt(scope="repair", status="repair_failed", agent_id="main")
    make_receipt(
        scope="repair", status="repair_failed", session_key="agent:other:webchat:x", agent_id="x"
    )
    headers = {"Idempotency-Key": "plan-reuse"}
    first = operator.post("/requeue-plans", {"filters": {"agent": "main"}}, headers=headers)
    assert first.status_code == 201
    other = operator.post("/requeue-plans", {"filters": {"agent": "other"}}, headers=headers)
    body = assert_error(other, 422, "idempotency_key_reused")
    assert "different body" in body["detail"]
    assert RequeuePlan.objects.count() == 1
    # The same body is still a replay of the first answer.
    again = operator.post("/requeue-plans", {"filters": {"agent": "main"}}, headers=headers)
    assert again.status_code == 201 and again.json()["plan_id"] == first.json()["plan_id"]


def test_the_same_body_with_keys_in_another_order_is_the_same_request(operator):
    make_receipt(scope="repair", status="repair_failed")
    headers = {"Idempotency-Key": "plan-order"}
    a = operator.post(
        "/requeue-plans", {"filters": {"status": "repair_failed"}, "reason": "r"}, headers=headers
    )
    b = operator.post(
        "/requeue-plans", {"reason": "r", "filters": {"status": "repair_failed"}}, headers=headers
    )
    assert a.status_code == b.status_code == 201
    assert a.json()["plan_id"] == b.json()["plan_id"]


# --- item 16: deeply nested JSON -----------------------------------------------------------------


@pytest.mark.parametrize("depth", [500, 990, 5000])
def test_deeply_nested_json_is_a_422_not_a_500(operator, depth):
    nested = "[" * depth + "]" * depth
    raw = json.dumps({"filters": {"status": "__N__"}}).replace('"__N__"', nested)
    response = operator.post("/requeue-plans", raw=raw)
    body = assert_error(response, 422, "validation_error")
    assert "nested" in json.dumps(body["detail"])
    assert not RequeuePlan.objects.exists()


def test_moderately_nested_json_is_still_accepted(operator):
    from tests.factories import make_session

    make_session("agent:main:webchat:nest")
    content = {"a": [{"b": [1, 2, {"c": "d"}]}]}
    response = operator.post(
        "/sessions/agent:main:webchat:nest/messages", {"role": "user", "content": content}
    )
    assert response.status_code == 201, response.content


# --- item 17: every /api/ error is JSON ----------------------------------------------------------


@pytest.mark.parametrize(
    "method, path",
    [("delete", "/receipts"), ("put", "/health"), ("post", "/receipts/x"), ("get", "/tokens/1")],
)
def test_a_wrong_method_is_a_json_405(admin, method, path):
    response = admin.send(method.upper(), path, {} if method != "get" else None)
    body = assert_error(response, 405, "method_not_allowed")
    assert response["Allow"]
    assert method.upper() not in response["Allow"]
    assert body["allowed_methods"]


def test_an_unsafe_console_call_without_csrf_is_a_json_403():
    make_user("ops", "operator")
    browser = Client(enforce_csrf_checks=True)
    browser.login(username="ops", password="pw-Secret-123")
    response = browser.put(
        f"{API}/receipts", data=json.dumps(_receipt()), content_type="application/json"
    )
    body = assert_error(response, 403, "csrf_failed")
    assert "X-CSRFToken" in body["detail"]
    assert not MemoryDurableReceipt.objects.exists()


def test_a_body_over_the_site_limit_says_the_limit(operator, settings):
    response = operator.put("/receipts", raw="x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10))
    body = assert_error(response, 413, "payload_too_large")
    assert body["limit_bytes"] > 0


def _chunked(operator, payload: bytes):
    """A request as gunicorn hands a chunked one to Django: de-chunked input, no length."""
    return operator.client.generic(
        "PUT",
        f"{API}/receipts",
        CONTENT_TYPE="application/json",
        HTTP_TRANSFER_ENCODING="chunked",
        HTTP_AUTHORIZATION=f"Bearer {operator.token}",
        **{"wsgi.input": BytesIO(payload)},
    )


def test_a_chunked_body_is_read(operator):
    response = _chunked(operator, json.dumps(_receipt()).encode())
    assert response.status_code == 200, response.content
    assert MemoryDurableReceipt.objects.get().idempotency_key == "contract:1"


def test_a_chunked_body_over_the_limit_is_a_413_with_the_limit(operator, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = assert_error(_chunked(operator, b" " * 2000), 413, "payload_too_large")
    assert body["limit_bytes"] == 1000


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
)
def test_a_non_json_content_type_is_a_415(operator, content_type):
    response = operator.client.put(
        f"{API}/receipts",
        data=json.dumps(_receipt()),
        content_type=content_type,
        headers={"Authorization": f"Bearer {operator.token}"},
    )
    body = assert_error(response, 415, "unsupported_media_type")
    assert "application/json" in body["detail"]
    assert not MemoryDurableReceipt.objects.exists()


def test_json_with_a_charset_is_accepted(operator):
    response = operator.client.put(
        f"{API}/receipts",
        data=json.dumps(_receipt()),
        content_type="application/json; charset=utf-8",
        headers={"Authorization": f"Bearer {operator.token}"},
    )
    assert response.status_code == 200, response.content


# --- item 14: a request the server killed frees its key ----------------------------------------


def _reservation(owner_token: str, age_ms: int) -> None:
    from opensquilla_site.idempotency import IN_PROGRESS
    from opensquilla_site.models import IdempotentRequest
    from opensquilla_site.timeutil import now_ms
    from opensquilla_site.tokens import authenticate_token

    token = authenticate_token(owner_token)
    assert token is not None
    IdempotentRequest.objects.create(
        key="killed",
        token_digest=token.digest,
        method="POST",
        path=f"{API}/requeue-plans",
        status_code=IN_PROGRESS,
        response_body={},
        created_at=now_ms() - age_ms,
    )


def test_a_key_held_by_a_request_younger_than_the_server_timeout_is_in_progress(operator):
    from opensquilla_site.serving import WEB_TIMEOUT_SECONDS

    _reservation(operator.token, age_ms=(WEB_TIMEOUT_SECONDS - 5) * 1000)
    response = operator.post(
        "/requeue-plans",
        {"filters": {"status": "repair_failed"}},
        headers={"Idempotency-Key": "killed"},
    )
    assert_error(response, 409, "idempotency_in_progress")


def test_a_key_held_past_the_server_timeout_is_freed_and_the_retry_runs(operator):
    from opensquilla_site.serving import ABANDONED_REQUEST_SECONDS, WEB_TIMEOUT_SECONDS

    # The server has killed any request older than its timeout: the key is free after it.
    assert WEB_TIMEOUT_SECONDS < ABANDONED_REQUEST_SECONDS < 10 * 60
    _reservation(operator.token, age_ms=(ABANDONED_REQUEST_SECONDS + 1) * 1000)
    make_receipt(scope="repair", status="repair_failed")
    response = operator.post(
        "/requeue-plans",
        {"filters": {"status": "repair_failed"}},
        headers={"Idempotency-Key": "killed"},
    )
    assert response.status_code == 201, response.content
    assert RequeuePlan.objects.count() == 1


# --- item 12: a deadlocked bulk batch is retried (bounded, with backoff) before answering --------


def _deadlock() -> Exception:
    import psycopg.errors
    from django.db import OperationalError

    error = OperationalError("deadlock detected")
    error.__cause__ = psycopg.errors.DeadlockDetected("deadlock detected")
    return error


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("failures, status", [(1, 200), (7, 200), (8, 500)])
def test_a_deadlocked_bulk_batch_is_retried_until_it_lands(operator, monkeypatch, failures, status):
    from receipts_app.ledger import fastsql, retry

    real = fastsql.bulk_upsert
    calls = []

    def flaky(rows):
        calls.append(len(rows))
        if len(calls) <= failures:
            raise _deadlock()
        return real(rows)

    monkeypatch.setattr(fastsql, "bulk_upsert", flaky)
    monkeypatch.setattr(retry.time, "sleep", lambda seconds: None)
    rows = [_receipt(idempotency_key=f"dl:{i}") for i in (3, 1, 2)]
    response = operator.post("/receipts/bulk", {"receipts": rows})
    assert response.status_code == status, response.content
    # Up to retry.ATTEMPTS (8) runs in all; the conflict that outlasts them is the answer.
    assert len(calls) == min(failures + 1, retry.ATTEMPTS)
    stored = MemoryDurableReceipt.objects.count()
    assert stored == (3 if status == 200 else 0)
