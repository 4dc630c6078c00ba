"""Every input bounded at every door, and a refused call leaves nothing behind.

What an attacker's probe found, as the user meets it: an id one character over the stored
length is a 404 (never a 500 on PostgreSQL); a turn id that would make an idempotency key no
door accepts is refused before anything is written; a receipt stored with a key that long still
has a page; a requeue refused for a receipt of another gateway writes nothing into that
receipt's timeline; ``/metrics`` makes no series per free-text status or scope; a console
action naming an unknown gateway says so.
"""

from __future__ import annotations

import pytest
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from opensquilla_site.identifiers import IDEMPOTENCY_KEY_MAX
from opensquilla_site.tokens import create_api_token
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent
from sessions_app.gateways import ensure_gateway, using_gateway
from tests.api.conftest import ApiCaller, _caller, assert_error
from tests.console.conftest import operator_client  # noqa: F401
from tests.factories import make_receipt, make_session, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(db) -> ApiCaller:
    return _caller("door-bounds-op", "operator", "operate")


KEY = "agent:main:webchat:default"


def failed_in(gateway: str) -> MemoryDurableReceipt:
    ensure_gateway(gateway)
    with using_gateway(gateway):
        session = make_session(KEY, messages=2)
        return make_receipt(
            session_key=KEY,
            session_id=session.session_id,
            status="checkpoint_failed",
            reason="disk full",
        )


@pytest.mark.parametrize("verb", ["requeue", "acknowledge"])
@pytest.mark.parametrize("length", [128, 129, 5000])
def test_an_id_longer_than_any_receipt_is_not_found_and_writes_nothing(api, verb, length):
    response = api.post(f"/receipts/{'r' * length}/{verb}", {"reason": "probe"})
    assert_error(response, 404, "not_found")
    # Nothing names the id: no event under it (a 129-character one could not even be stored).
    assert not ReceiptEvent.objects.filter(action=verb).exists() or length == 128


@pytest.mark.parametrize("verb", ["requeue", "acknowledge"])
def test_a_requeue_refused_for_another_gateways_receipt_leaves_its_timeline_alone(api, verb):
    row = failed_in("gwb")
    response = api.post(f"/receipts/{row.receipt_id}/{verb}?gateway=local", {"reason": "probe"})
    assert_error(response, 404, "not_found")
    with using_gateway(None):
        assert not ReceiptEvent.objects.filter(receipt_id=row.receipt_id).exists()
        row.refresh_from_db()
    assert row.status == "checkpoint_failed"


def test_a_requeue_of_a_receipt_no_gateway_holds_is_still_recorded(api):
    # A receipt purged meanwhile keeps the attempt in its history (the audit outlives it).
    response = api.post("/receipts/gone-meanwhile/requeue", {"reason": "probe"})
    assert_error(response, 404, "not_found")
    event = ReceiptEvent.objects.get(receipt_id="gone-meanwhile")
    assert (event.action, event.outcome) == ("requeue", "not_found")


@pytest.mark.parametrize("wait", ["true", "false"])
def test_a_turn_id_no_idempotency_key_could_hold_is_refused_before_any_write(api, wait):
    make_session(KEY, messages=2)
    response = api.post(f"/sessions/{KEY}/checkpoints?wait={wait}", {"turn_id": "t" * 60_000})
    assert_error(response, 422, "validation_error")
    # Just under the schema's bound, the whole key (session key + turn id + hashes) is still
    # too long: the service refuses it with the room left, before queueing or writing.
    almost = "t" * (IDEMPOTENCY_KEY_MAX - 10)
    response = api.post(f"/sessions/{KEY}/checkpoints?wait={wait}", {"turn_id": almost})
    assert_error(response, 422, "validation_error")
    assert "turn_id is too long" in response.json()["detail"]
    assert not MemoryDurableReceipt.objects.exists()
    assert not ReceiptEvent.objects.filter(action="checkpoint_now").exists()


def test_a_turn_id_that_fits_makes_a_receipt_whose_page_opens(api, operator_client):  # noqa: F811
    make_session(KEY, messages=2)
    response = api.post(f"/sessions/{KEY}/checkpoints?wait=true", {"turn_id": "cmp_7"})
    assert response.status_code == 200, response.content
    receipt = MemoryDurableReceipt.objects.get()
    assert ":cmp_7:" in receipt.idempotency_key
    page = operator_client.get(reverse("receipts:detail", args=[receipt.receipt_id]))
    assert page.status_code == 200


def test_a_receipt_stored_with_a_very_long_key_still_has_a_page(operator_client):  # noqa: F811
    # Rows written before the bound (or by an importer) keep their page: the related-receipts
    # lookup never hands SQLite a LIKE pattern it refuses as too complex.
    turn = "t" * 60_000
    row = make_receipt(
        session_key=KEY,
        turn_id=turn,
        idempotency_key=f"checkpoint:{KEY}:{turn}:{'0' * 64}",
        status="checkpoint_saved",
    )
    sibling = make_receipt(
        session_key=KEY,
        turn_id=turn,
        idempotency_key=f"checkpoint:{KEY}:{turn}:{'1' * 64}:failed:x",
        status="checkpoint_failed",
    )
    page = operator_client.get(reverse("receipts:detail", args=[row.receipt_id]))
    assert page.status_code == 200
    assert sibling.receipt_id in page.content.decode()


def test_metrics_count_unknown_statuses_and_scopes_under_one_label(db):
    for n in range(30):
        make_receipt(session_key=KEY, scope=f"fuzz-scope-{n}", status=f"fuzz-status-{n}")
    make_receipt(session_key=KEY, status="checkpoint_saved")
    user = make_user("metrics-bounds", "viewer")
    _token, plaintext = create_api_token(user=user, name="m", scope="read")
    from django.test import Client

    body = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {plaintext}").content.decode()
    series = {}
    for family in text_string_to_metric_families(body):
        if family.name == "opensquilla_receipts":
            for sample in family.samples:
                series[(sample.labels["scope"], sample.labels["status"])] = sample.value
    assert series == {("other", "other"): 30, ("checkpoint", "checkpoint_saved"): 1}


def test_a_console_action_naming_an_unknown_gateway_says_so(operator_client):  # noqa: F811
    make_session(KEY, messages=2)
    url = reverse("receipts:session_flush") + "?gateway=nowhere"
    response = operator_client.post(url, {"key": KEY})
    assert response.status_code == 404
    text = response.content.decode()
    assert "No gateway is named" in text and "Session not found" not in text
