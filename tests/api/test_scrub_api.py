"""The on-demand checkpoint scrub through the API: queued to the worker that holds the gateway's
files; ``?verified=`` lists exactly what the scrub found; ``GET /gateways`` says how much of each
gateway's saved memory was verified."""

from __future__ import annotations

import pytest

from receipts_app.models import OutboxMessage
from sessions_app.gateways import ensure_gateway
from tests.scrub_support import scrubbed_b

from .conftest import assert_error

pytestmark = pytest.mark.django_db


def test_post_scrub_queues_it_to_the_gateways_own_queue(operator):
    ensure_gateway("b")
    response = operator.post("/gateways/b/scrub", {"agent": "Main", "full": True})
    assert response.status_code == 202, response.content
    body = response.json()
    message = OutboxMessage.objects.get(task_id=body["task_id"])
    assert (message.task, message.queue) == ("scrub_checkpoints", "gateway.b")
    assert message.kwargs == {"gateway": "b", "agent": "main", "force": True, "full": True}
    assert "status=checkpoint_missing%2Chash_mismatch" in body["status_url"]
    assert "gateway b has no live worker" in body["warning"]


def test_post_scrub_of_an_unknown_gateway_is_404_and_a_bad_name_422(operator, reader):
    assert_error(operator.post("/gateways/nope/scrub"), 404, "not_found")
    assert_error(operator.post("/gateways/NO%20PE/scrub"), 422, "validation_error")
    assert reader.post("/gateways/local/scrub").status_code == 403


def test_the_verified_filter_lists_exactly_the_scrubs_findings(operator, settings, workspace):
    gone, whole = scrubbed_b(settings, workspace)

    def ids(verified: str) -> set[str]:
        listed = operator.get(f"/receipts?verified={verified}").json()["items"]
        return {r["receipt_id"] for r in listed}

    assert ids("unsafe") == {gone.receipt_id}
    assert ids("ok") == {whole.receipt_id}
    assert ids("stale") == {gone.receipt_id}
    assert ids("never") == set()
    assert_error(operator.get("/receipts?verified=maybe"), 422, "validation_error")
    fleet = operator.get("/gateways").json()["items"]
    b = next(g for g in fleet if g["name"] == "b")["checkpoints"]
    assert (b["saved"], b["verified"], b["missing"], b["damaged"]) == (2, 1, 1, 0)
    assert b["filters"]["missing"] == {
        "gateway": "b",
        "scope": "checkpoint",
        "status": "checkpoint_missing",
    }
