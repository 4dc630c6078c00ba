"""The error contract itself: a crash is a bare 500, and every error body has the same shape."""

from __future__ import annotations

import pytest

from opensquilla_site.exceptions import GenerationChanged
from tests.api.conftest import assert_error

pytestmark = pytest.mark.django_db


def test_an_unexpected_exception_is_a_500_without_a_stack_trace(reader, monkeypatch, caplog):
    def explode(*args, **kwargs):
        raise RuntimeError("secret internals: /etc/passwd")

    monkeypatch.setattr("receipts_app.api.page_receipts", explode)
    response = reader.get("/receipts")
    body = assert_error(response, 500, "internal_error")
    assert body == {"detail": "internal error", "code": "internal_error"}
    assert "secret internals" not in response.content.decode()
    # Operators still get the details, in the log.
    assert any("secret internals" in (r.exc_text or "") or r.exc_info for r in caplog.records)


def test_a_generation_fence_is_409_and_a_plain_key_error_404(operator, monkeypatch):
    def fenced(*args, **kwargs):
        raise GenerationChanged("agent:main:x")

    monkeypatch.setattr("receipts_app.api.requeue.requeue_receipt", fenced)
    body = assert_error(operator.post("/receipts/any/requeue"), 409, "generation_changed")
    assert body["detail"] == "Session generation changed: agent:main:x"

    def missing(*args, **kwargs):
        # The same words in a plain KeyError are not a fence: errors are mapped by type.
        raise KeyError("Session generation changed: agent:main:x")

    monkeypatch.setattr("receipts_app.api.requeue.requeue_receipt", missing)
    assert_error(operator.post("/receipts/any/requeue"), 404, "not_found")


def test_unknown_fields_in_a_body_are_listed(operator):
    body = assert_error(
        operator.post("/sessions", {"session_key": "k", "colour": 1}), 422, "validation_error"
    )
    assert isinstance(body["detail"], list) and body["detail"][0]["loc"][-1] == "colour"


def test_openapi_docs_are_served(reader):
    response = reader.client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    operation_ids = [
        op["operationId"] for path in response.json()["paths"].values() for op in path.values()
    ]
    assert len(operation_ids) == len(set(operation_ids))
    assert {"list_receipts", "upsert_receipt", "requeue_receipt", "create_requeue_plan"} <= set(
        operation_ids
    )
    assert reader.client.get("/api/v1/docs").status_code == 200


@pytest.mark.parametrize("value", [5, 1.5, True, {"a": 1}, [5], [["checkpoint_failed"]]])
@pytest.mark.parametrize("name", ["status", "scope", "receipt_id"])
def test_a_plan_filter_of_the_wrong_type_is_a_422_not_a_500(operator, name, value):
    response = operator.post("/requeue-plans", {"filters": {name: value}})
    body = assert_error(response, 422, "validation_error")
    assert f"{name} must be text or a list of text" in body["detail"]


@pytest.mark.parametrize(
    "filters,message",
    [
        ({"session_id": {"x": 1}}, "session_id must be text"),
        ({"agent": ["main"]}, "agent must be text"),
        ({"attempts_min": 1.5}, "attempts_min must be a whole number"),
        ({"due": 5}, "due must be true or false"),
        ({"created_from": True}, "created_from must be epoch milliseconds"),
    ],
)
def test_every_filter_kind_names_a_value_of_the_wrong_type(operator, filters, message):
    body = assert_error(
        operator.post("/requeue-plans", {"filters": filters}), 422, "validation_error"
    )
    assert message in body["detail"]


@pytest.mark.parametrize("query", ["?cursor=%00", "?status=a%00b", "?limit=1&reason=%00"])
def test_a_nul_in_an_api_query_string_is_a_422(reader, query):
    body = assert_error(reader.get("/receipts" + query), 422, "validation_error")
    assert "NUL character" in body["detail"]


def test_a_nul_in_a_json_object_key_is_a_422(operator):
    from tests.factories import make_session

    session = make_session("agent:main:webchat:nul-key")
    message = {"role": "assistant", "content": "x", "tool_calls": [{"na\u0000me": "f"}]}
    response = operator.post(f"/sessions/{session.session_key}/messages", message)
    assert_error(response, 422, "validation_error")
    plan = operator.post("/requeue-plans", {"filters": {"status\u0000": "x"}})
    assert_error(plan, 422, "validation_error")
