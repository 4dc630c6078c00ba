"""Keys and ids with control characters: refused at every door, and harmless once stored.

A line break in a session key or receipt id made Django's URL reversing fail (a 500 on every
page listing the row), and a ``\\r\\n`` in an id is a header injection wherever it is echoed.
New keys and ids are refused (422 at the API, ValueError in the services, skipped and reported
by the importer and the mirror); a row stored before the rule, or by hand, still renders on
every page, with links that open it.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from django.urls import reverse

from receipts_app import ledger
from receipts_app.audit import Actor
from receipts_app.importer import import_opensquilla
from receipts_app.mirror.follower import Follower
from receipts_app.models import MemoryDurableReceipt
from receipts_app.requeue import create_requeue_plan
from sessions_app import services as session_services
from sessions_app.models import Session, TranscriptEntry
from tests.api.conftest import ApiCaller, _caller
from tests.console.conftest import _client_for
from tests.factories import make_receipt
from tests.mirror.opensquilla_source import FakeGateway

pytestmark = pytest.mark.django_db

NEWLINE_KEY = "agent:main:webchat:x\nsecond-line"
HEADER_ID = "a\r\nSet-Cookie: x=y"
BAD_VALUES = ["x\ny", "x\r\ny", "x\ty", "x\x1by", "x\x7fy", "x\x85y", "x\u2028y"]


@pytest.fixture
def operator(settings) -> ApiCaller:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    return _caller("operator", "operator", "operate")


@pytest.fixture
def reader(settings) -> ApiCaller:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    return _caller("reader", "viewer", "read")


@pytest.fixture
def viewer_client():
    return _client_for("viewer", "vera")


@pytest.fixture
def operator_client():
    return _client_for("operator", "otto")


def _receipt_body(**fields):
    body = {
        "session_key": "agent:main:webchat:ok",
        "session_id": "s-1",
        "scope": "checkpoint",
        "idempotency_key": "cc:1",
        "status": "checkpoint_failed",
        "reason": "line one\nline two",  # free text keeps its line breaks
    }
    body.update(fields)
    return body


def _problem_text(response) -> str:
    detail = response.json()["detail"]
    return detail if isinstance(detail, str) else " ".join(str(e.get("msg")) for e in detail)


# --- the API -------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", BAD_VALUES)
def test_a_session_key_with_a_control_character_is_a_422(operator, bad):
    response = operator.post("/sessions", {"session_key": f"agent:main:webchat:{bad}"})
    assert response.status_code == 422, response.content
    assert response.json()["code"] == "validation_error"
    assert "control characters" in _problem_text(response)
    assert not Session.objects.exists()


def test_surrounding_whitespace_of_a_key_is_still_canonicalised_away(operator):
    response = operator.post("/sessions", {"session_key": "\t agent:Main:webchat:ok \n"})
    assert response.status_code == 201, response.content
    assert response.json()["session_key"] == "agent:main:webchat:ok"


@pytest.mark.parametrize(
    "column,value",
    [
        ("receipt_id", HEADER_ID),
        ("session_key", NEWLINE_KEY),
        ("idempotency_key", "cc:\n1"),
        ("session_id", "s\t1"),
        ("scope", "check\npoint"),
        ("status", "checkpoint_failed\r"),
    ],
)
def test_an_upsert_with_a_control_character_in_a_key_or_id_is_a_422(
    operator,
    column,
    value,
):
    response = operator.put("/receipts", _receipt_body(**{column: value}))
    assert response.status_code == 422, response.content
    assert column in str(response.json()["detail"])
    assert "control characters" in _problem_text(response)
    bulk = operator.post(
        "/receipts/bulk",
        {"receipts": [_receipt_body(idempotency_key="cc:0"), _receipt_body(**{column: value})]},
    )
    assert bulk.status_code == 422, bulk.content
    assert not MemoryDurableReceipt.objects.exists()


def test_free_text_keeps_its_line_breaks(operator):
    response = operator.put("/receipts", _receipt_body())
    assert response.status_code == 200, response.content
    assert response.json()["reason"] == "line one\nline two"


def test_an_update_and_a_plan_refuse_control_characters_too(operator):
    stored = make_receipt(status="checkpoint_failed")
    for patch in (
        {"session_key": NEWLINE_KEY},
        {"status": "a\nb"},
        {"resolved_by_receipt_id": "r\n"},
    ):
        response = operator.patch(f"/receipts/{stored.receipt_id}", patch)
        assert response.status_code == 422, (patch, response.content)
    plan = operator.post("/requeue-plans", {"receipt_ids": [HEADER_ID]})
    assert plan.status_code == 422, plan.content
    assert MemoryDurableReceipt.objects.get(pk=stored.pk).session_key == stored.session_key


# --- the Python services -------------------------------------------------------------------


def test_the_services_refuse_what_the_api_refuses():
    with pytest.raises(ValueError, match="session_key must not contain control characters"):
        session_services.create_session(NEWLINE_KEY)
    with pytest.raises(ValueError, match="receipt_id must not contain control characters"):
        make_receipt(receipt_id=HEADER_ID)
    with pytest.raises(ValueError, match="idempotency_key must not contain control characters"):
        ledger.bulk_upsert_memory_durable_receipts(
            [
                MemoryDurableReceipt(
                    session_key="agent:main:x",
                    session_id="s",
                    scope="checkpoint",
                    idempotency_key="k\n",
                    status="checkpoint_saved",
                )
            ]
        )
    stored = make_receipt()
    with pytest.raises(ValueError, match="status must not contain control characters"):
        ledger.update_memory_durable_receipt(stored.receipt_id, status="a\nb")
    assert not Session.objects.exists()
    assert MemoryDurableReceipt.objects.count() == 1
    # A key that canonicalises cleanly is accepted as before.
    assert session_services.create_session("  agent:Ops:webchat:y\n").session_key == (
        "agent:ops:webchat:y"
    )


# --- rows already stored -------------------------------------------------------------------


@pytest.fixture
def stored_with_newlines():
    """A session and receipts written straight to the tables, past every door's check."""
    session = Session.objects.create(session_key=NEWLINE_KEY, agent_id="main")
    TranscriptEntry.objects.create(
        session_id=session.session_id,
        session_key=NEWLINE_KEY,
        role="user",
        content="hi",
        created_at=1,
    )
    failed = MemoryDurableReceipt.objects.create(
        receipt_id=HEADER_ID,
        session_key=NEWLINE_KEY,
        session_id=session.session_id,
        scope="checkpoint",
        idempotency_key="legacy\n1",
        status="checkpoint_failed",
        agent_id="main",
        reason="disk full",
        created_at=1,
        updated_at=1,
        resolved_by_receipt_id="other\nid",
    )
    return session, failed


def test_every_page_renders_rows_stored_with_line_breaks(
    viewer_client,
    stored_with_newlines,
):
    session, failed = stored_with_newlines
    detail_url = reverse("receipts:detail", args=[failed.receipt_id])
    session_url = reverse("sessions:detail", args=[session.session_key])
    assert "%0D%0A" in detail_url and "%0A" in session_url
    pages = [
        reverse("receipts:overview"),
        reverse("receipts:list"),
        reverse("receipts:list") + "?status=checkpoint_failed",
        reverse("receipts:audit"),
        reverse("sessions:list"),
        detail_url,
        session_url,
        reverse("receipts:session_memory") + "?key=" + quote(NEWLINE_KEY),
    ]
    for url in pages:
        response = viewer_client.get(url)
        assert response.status_code == 200, (url, response.status_code)
    listing = viewer_client.get(reverse("receipts:list")).content.decode()
    assert detail_url in listing and session_url in listing


def test_a_stored_row_with_a_line_break_can_still_be_acted_on(
    operator_client,
    stored_with_newlines,
):
    _session, failed = stored_with_newlines
    response = operator_client.post(
        reverse("receipts:acknowledge", args=[failed.receipt_id]), {"reason": "legacy row"}
    )
    assert response.status_code == 302, response.content
    assert MemoryDurableReceipt.objects.get(pk=failed.pk).status == "acknowledged"


def test_the_api_still_reads_and_deletes_a_stored_row(reader, stored_with_newlines):
    _session, failed = stored_with_newlines
    response = reader.get("/receipts/" + quote(failed.receipt_id, safe=""))
    assert response.status_code == 200, response.content
    assert response.json()["receipt_id"] == HEADER_ID
    plan = create_requeue_plan(
        filters={"status": ["checkpoint_failed"]}, receipt_ids=None, actor=Actor("t", "cli")
    )
    assert plan.total == 1


# --- the importer and the mirror ------------------------------------------------------------


@pytest.fixture
def gateway(tmp_path):
    gw = FakeGateway(tmp_path / "sessions.db")
    yield gw
    gw.close()


def _bad_source(gateway: FakeGateway) -> dict:
    gateway.add_session("agent:main:webchat:good")
    gateway.add_entry("agent:main:webchat:good", "fine")
    good = gateway.add_receipt("agent:main:webchat:good")
    gateway.add_session(NEWLINE_KEY)
    gateway.add_entry(NEWLINE_KEY, "hidden")
    gateway.add_receipt(NEWLINE_KEY)
    gateway.add_receipt("agent:main:webchat:good", receipt_id=HEADER_ID, turn_id="t2")
    return good


def _rowid(gateway: FakeGateway, table: str, where: str, value: str) -> int:
    sql = f"SELECT rowid FROM {table} WHERE {where} = ?"  # noqa: S608 - test constants
    return int(gateway.conn.execute(sql, (value,)).fetchone()[0])


def test_the_importer_skips_and_reports_rows_with_control_characters(gateway):
    good = _bad_source(gateway)
    report = import_opensquilla(db_path=gateway.path, workspace=None)

    assert (report.sessions.created, report.sessions.skipped) == (1, 1)
    assert (report.transcript_entries.created, report.transcript_entries.skipped) == (1, 1)
    assert (report.receipts.created, report.receipts.skipped) == (1, 2)
    assert list(MemoryDurableReceipt.objects.values_list("receipt_id", flat=True)) == [
        good["receipt_id"]
    ]
    assert not Session.objects.filter(session_key__contains="\n").exists()
    session_rowid = _rowid(gateway, "sessions", "session_key", NEWLINE_KEY)
    receipt_rowid = _rowid(gateway, "memory_durable_receipts", "receipt_id", HEADER_ID)
    text = "\n".join(report.warnings)
    assert f"session at source rowid {session_rowid}: session_key must not contain control" in text
    assert f"receipt at source rowid {receipt_rowid}: receipt_id must not contain control" in text
    # A second run skips (and reports) them again, and imports nothing new.
    again = import_opensquilla(db_path=gateway.path, workspace=None)
    assert again.receipts.skipped == 2 and not again.changed


def test_the_mirror_skips_and_reports_rows_with_control_characters(gateway):
    good = _bad_source(gateway)
    f = Follower(
        db_path=gateway.path,
        workspace=None,
        checkpoint_root=None,
        memory_template=None,
        interval=0.1,
        owner="test-follower",
    )
    assert f.poll() == "synced"
    assert list(MemoryDurableReceipt.objects.values_list("receipt_id", flat=True)) == [
        good["receipt_id"]
    ]
    assert Session.objects.count() == 1 and TranscriptEntry.objects.count() == 1
    # The follower moved past them: a later good row still arrives.
    later = gateway.add_receipt("agent:main:webchat:good", turn_id="t3")
    assert f.poll() == "synced"
    assert MemoryDurableReceipt.objects.filter(receipt_id=later["receipt_id"]).exists()
    assert not MemoryDurableReceipt.objects.filter(receipt_id=HEADER_ID).exists()
