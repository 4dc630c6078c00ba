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
