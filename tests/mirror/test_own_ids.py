"""Three gateways with overlapping keys and entry ids, each under its own ids.

The same real 0.3.0 ledger (tests/golden) imported as gateways a, b and c: every session key,
every idempotency key, every receipt id and every transcript entry id 1..140 collide. Each
gateway's sessions must read covered exactly as its own ledger says (through the API and on the
session page), and a checkpoint retaken for b must be the file b itself wrote for the same
transcript, in b's workspace only.
"""

from __future__ import annotations

import importlib
import json
import sqlite3
from pathlib import Path
from urllib.parse import quote

import pytest
from django.apps import apps as django_apps

from opensquilla_site.celery import app as celery_app
from receipts_app.audit import Actor
from receipts_app.checkpoint import checkpoint_coverage_hash, checkpoint_turn_id
from receipts_app.importer import import_opensquilla
from receipts_app.mirror.follower import build_follower
from receipts_app.mirror.models import MirroredTranscript, MirrorSource
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent
from receipts_app.requeue import requeue_receipt
from receipts_app.selectors import current_checkpoint_coverage
from sessions_app.gateways import Gateway, using_gateway
from sessions_app.models import Session, TranscriptEntry
from tests.api.conftest import reader  # noqa: F401
from tests.console.conftest import viewer_client  # noqa: F401

from .own_ledger import own_coverage

pytestmark = pytest.mark.django_db

GATEWAYS = ("a", "b", "c")
KEY = "agent:main:webchat:s1-0"  # ends with b's checkpoint_saved and has a checkpoint_failed


@pytest.fixture
def golden(golden_dir) -> Path:
    return golden_dir / "opensquilla-0.3.0"


@pytest.fixture
def three(golden, tmp_path, settings) -> Path:
    """a, b and c imported from the same ledger, each with its files under its own root."""
    root = tmp_path / "ours"
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(root)
    settings.OPENSQUILLA_MEMORY_WORKSPACE = None
    for name in GATEWAYS:
        import_opensquilla(
            db_path=golden / "sessions.db", workspace=golden / "workspace", gateway=name
        )
    return root


def _covered_here(gateway: str) -> dict[str, bool]:
    with using_gateway(gateway):
        return {
            session.session_key: current_checkpoint_coverage(session)[0] is not None
            for session in Session.objects.here()
        }


def test_every_gateway_reads_covered_exactly_as_its_own_ledger_says(golden, three):
    theirs = own_coverage(golden / "sessions.db")
    assert theirs and all(theirs.values())  # each session ends with a covering checkpoint
    for name in GATEWAYS:
        assert _covered_here(name) == theirs, name
    # Their entries keep their own ids, under ids of ours that never collide.
    for name in GATEWAYS:
        own = TranscriptEntry.objects.filter(gateway_id=name).values_list(
            "gateway_entry_id", flat=True
        )
        assert sorted(own) == list(range(1, 141))
    assert TranscriptEntry.objects.values("id").distinct().count() == 3 * 140


def test_followed_gateways_read_covered_as_their_own_ledgers_say(golden, tmp_path, settings):
    """The same through the live mirror: a, b and c followed from their own files, then one
    more message in b's session (uncovered there, and so here), then b's own checkpoint of it."""
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(tmp_path / "ours")
    followers = {}
    for name in GATEWAYS:
        db = tmp_path / name / "sessions.db"
        db.parent.mkdir()
        source = sqlite3.connect(f"file:{golden / 'sessions.db'}?mode=ro", uri=True)
        target = sqlite3.connect(db)
        source.backup(target)
        source.close()
        target.close()
        followers[name] = (db, build_follower(db_path=db, workspace=None, gateway=name))
        assert followers[name][1].poll() == "synced"
    theirs = own_coverage(golden / "sessions.db")
    for name in GATEWAYS:
        assert _covered_here(name) == theirs, name

    db_b, follower_b = followers["b"]
    conn = sqlite3.connect(db_b)
    with conn:
        (session_id,) = conn.execute(
            "SELECT session_id FROM sessions WHERE session_key = ?", (KEY,)
        ).fetchone()
        conn.execute(
            "INSERT INTO transcript_entries (session_id, session_key, message_id, role, content,"
            " created_at) VALUES (?, ?, 'late', 'user', 'one more', 1)",
            (session_id, KEY),
        )
        conn.execute(
            "UPDATE sessions SET updated_at = updated_at + 1 WHERE session_key = ?", (KEY,)
        )
    conn.close()
    assert follower_b.poll() == "synced"
    now_theirs = own_coverage(db_b)
    assert now_theirs[KEY] is False
    assert _covered_here("b") == now_theirs
    assert _covered_here("a") == theirs  # a's same-named session is not b's

    # b checkpoints the longer transcript itself (its own ids: through-141, 9 entries).
    entries = [
        {
            "id": i,
            "role": r,
            "content": c,
            "tool_calls": None,
            "tool_call_id": t,
            "reasoning_content": rc,
        }
        for i, r, c, t, rc in sqlite3.connect(db_b).execute(
            "SELECT id, role, content, tool_call_id, reasoning_content FROM transcript_entries "
            "WHERE session_id = ? ORDER BY created_at, id",
            (session_id,),
        )
    ]
    conn = sqlite3.connect(db_b)
    with conn:
        conn.execute(
            "INSERT INTO memory_durable_receipts (receipt_id, session_key, session_id, turn_id, "
            "scope, coverage_turn_id, coverage_hash, coverage_entry_count, idempotency_key, "
            "status, created_at, updated_at) VALUES ('b-own', ?, ?, 'cmp_b', 'checkpoint', ?, ?,"
            " ?, 'checkpoint:b-own', 'checkpoint_saved', 9999999999998, 9999999999998)",
            (
                KEY,
                session_id,
                checkpoint_turn_id(entries),
                checkpoint_coverage_hash(entries),
                len(entries),
            ),
        )
    conn.close()
    assert follower_b.poll() == "synced"
    assert own_coverage(db_b)[KEY] is True and _covered_here("b")[KEY] is True
    for _db, follower in followers.values():
        follower.watch.close()


def test_all_27_sessions_read_covered_through_the_api_and_the_session_page(
    golden,
    three,
    reader,  # noqa: F811
    viewer_client,  # noqa: F811
):
    """The issue's count: 3 gateways x 9 sessions, every one covered in its own ledger."""
    theirs = own_coverage(golden / "sessions.db")
    said = {}
    for name in GATEWAYS:
        for key in theirs:
            api = reader.get(f"/sessions/{quote(key, safe=':')}/coverage", {"gateway": name})
            page = viewer_client.get(f"/session-memory/?key={quote(key)}&gateway={name}")
            said[name, key] = (
                api.json()["covered"],
                "<strong>Covered.</strong>" in page.content.decode(),
            )
    assert len(said) == 27
    assert said == {(name, key): (theirs[key], theirs[key]) for name in GATEWAYS for key in theirs}


def test_the_api_and_the_session_page_say_covered_for_b(three, reader, viewer_client):  # noqa: F811
    body = reader.get(f"/sessions/{KEY}/coverage", {"gateway": "b"}).json()
    assert body["covered"] is True
    with using_gateway("b"):
        own_checkpoint = MemoryDurableReceipt.objects.get(
            session_key=KEY, status="checkpoint_saved"
        )
    assert body["receipt"]["receipt_id"] == own_checkpoint.receipt_id
    assert own_checkpoint.coverage_turn_id == "through-8"  # b's own id, not ours
    page = viewer_client.get(f"/session-memory/?key={quote(KEY)}&gateway=b").content.decode()
    assert "<strong>Covered.</strong>" in page and "No saved checkpoint" not in page


def test_a_reimport_changes_nothing_and_renumbers_nothing(golden, three):
    again = import_opensquilla(db_path=golden / "sessions.db", workspace=None, gateway="b")
    assert not again.changed
    assert again.transcript_entries.unchanged == 140
    assert not any("new ids" in w for w in again.warnings)


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _without_turn(events: list[dict]) -> list[dict]:
    return [{k: v for k, v in e.items() if k not in ("turn_id", "event_id")} for e in events]


def test_a_retaken_checkpoint_of_b_is_bs_own_file_in_bs_workspace(
    golden, three, settings, monkeypatch, django_capture_on_commit_callbacks
):
    b_root = three / "gateways" / "b"
    others = {
        name: sorted(
            (p, p.read_bytes()) for p in (three / "gateways" / name).rglob("*") if p.is_file()
        )
        for name in ("a", "c")
    }
    # b's worker: b's queue, b's workspace.
    settings.OPENSQUILLA_GATEWAY = "b"
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(b_root)
    settings.CELERY_TASK_ALWAYS_EAGER = True
    monkeypatch.setitem(celery_app.conf, "task_always_eager", True)
    monkeypatch.setitem(celery_app.conf, "task_eager_propagates", True)
    with using_gateway("b"):
        failed = MemoryDurableReceipt.objects.filter(
            session_key=KEY, status="checkpoint_failed"
        ).first()
        own = MemoryDurableReceipt.objects.get(session_key=KEY, status="checkpoint_saved")
    assert failed is not None
    with django_capture_on_commit_callbacks(execute=True):
        requeue_receipt(receipt_id=failed.receipt_id, actor=Actor("alice", "api"))

    failed.refresh_from_db()
    assert failed.status == "checkpoint_recovered"
    retaken = MemoryDurableReceipt.objects.get(receipt_id=failed.resolved_by_receipt_id)
    assert retaken.gateway_id == "b"
    # The coverage b itself recorded for these 8 entries, with b's ids.
    assert (retaken.coverage_turn_id, retaken.coverage_hash, retaken.coverage_entry_count) == (
        own.coverage_turn_id,
        own.coverage_hash,
        own.coverage_entry_count,
    )
    written = b_root / str(retaken.source_path)
    assert written.is_file()
    theirs = _events(golden / "workspace" / str(own.source_path))
    ours = _events(written)
    # The same file apart from the turn id (the retake's, where b named its compaction) and the
    # event ids derived from it.
    assert _without_turn(ours) == _without_turn(theirs)
    # Nothing was written into another gateway's files.
    for name, files in others.items():
        assert (
            sorted(
                (p, p.read_bytes()) for p in (three / "gateways" / name).rglob("*") if p.is_file()
            )
            == files
        )


def test_a_retake_under_the_gateways_turn_id_is_byte_identical(golden, three):
    """Given b's own turn id, the checkpoint this product writes is b's file, byte for byte."""
    from receipts_app.checkpoint import build_checkpoint_events, serialise_checkpoint_events
    from sessions_app.services import get_transcript

    with using_gateway("b"):
        session = Session.objects.here().get(session_key=KEY)
        own = MemoryDurableReceipt.objects.get(session_key=KEY, status="checkpoint_saved")
        entries = get_transcript(session.session_id)
    events = build_checkpoint_events(
        entries, session_key=KEY, session_id=session.session_id, turn_id=own.turn_id
    )
    body = "".join(line + "\n" for line in serialise_checkpoint_events(events))
    assert body.encode("utf-8") == (golden / "workspace" / str(own.source_path)).read_bytes()


def test_two_gateways_holding_one_receipt_id_keep_both_addressable(three, reader):  # noqa: F811
    """b's and c's receipts arrive with a's receipt ids: they get ids of their own, so each
    stays addressable at /receipts/{id}; matching on later imports and passes is by
    idempotency key within the gateway, so the new id stays."""
    ids = {
        name: set(
            MemoryDurableReceipt.objects.filter(gateway_id=name).values_list(
                "receipt_id", flat=True
            )
        )
        for name in GATEWAYS
    }
    assert not ids["a"] & ids["b"] and not ids["b"] & ids["c"] and not ids["a"] & ids["c"]
    for name in GATEWAYS:
        some = next(iter(ids[name]))
        assert reader.get(f"/receipts/{some}").json()["gateway"] == name


# --- entries stored before own ids ----------------------------------------------------------


def _migration(app: str, name: str):
    return importlib.import_module(f"{app}.migrations.{name}")


def test_the_migration_gives_back_the_own_ids_the_database_holds():
    """Before own ids a second gateway's entry whose id was taken was stored under another id;
    the migration restores what the rows themselves say and leaves local's as they were."""
    with using_gateway("b"):
        Gateway.objects.get_or_create(name="b", defaults={"display_name": "b"})
        kept = TranscriptEntry.objects.create(
            session_id="s", session_key=KEY, role="user", message_id="m"
        )
        renamed = TranscriptEntry.objects.create(
            session_id="s", session_key=KEY, role="user", message_id="opensquilla-import-3"
        )
    native = TranscriptEntry.objects.create(session_id="l", session_key=KEY, role="user")
    _migration("sessions_app", "0009_transcript_own_ids").own_ids_back(django_apps, None)
    for row in (kept, renamed, native):
        row.refresh_from_db()
    assert kept.gateway_entry_id == kept.pk  # stored under its own id
    assert renamed.gateway_entry_id == 3  # its own id was in the name the importer gave it
    assert native.gateway_entry_id is None and native.own_id == native.pk  # local: as before


def test_the_migration_rereads_a_followed_gateway_only_where_ids_could_have_been_taken(tmp_path):
    for name in ("a", "b"):
        Gateway.objects.get_or_create(name=name, defaults={"display_name": name})
    alone = MirrorSource.objects.create(gateway_id="a", path=str(tmp_path / "a.db"), entries_id=40)
    MirroredTranscript.objects.create(source=alone, session_id="s", through_id=40, entry_count=40)
    reread = _migration(
        "receipts_app.mirror", "0007_transcript_tails_and_own_id_reread"
    ).reread_for_own_ids
    with using_gateway("a"):
        TranscriptEntry.objects.create(session_id="s", session_key=KEY, role="user")
    reread(django_apps, None)
    alone.refresh_from_db()
    assert alone.entries_id == 40  # only a's entries exist: nothing could have been renumbered
    shared = MirrorSource.objects.create(gateway_id="b", path=str(tmp_path / "b.db"), entries_id=40)
    MirroredTranscript.objects.create(source=shared, session_id="t", through_id=40, entry_count=40)
    reread(django_apps, None)
    shared.refresh_from_db()
    assert shared.entries_id == 0 and not MirroredTranscript.objects.filter(source=shared).exists()


def test_reading_the_source_again_restores_a_replaced_own_id_without_an_edit(golden, three):
    with using_gateway("b"):
        session = Session.objects.here().get(session_key=KEY)
        last = (
            TranscriptEntry.objects.here()
            .filter(session_id=session.session_id)
            .order_by("id")
            .last()
        )
        TranscriptEntry.objects.filter(pk=last.pk).update(gateway_entry_id=last.pk + 1000)
        assert current_checkpoint_coverage(session)[0] is None  # as after a renumbering
    again = import_opensquilla(db_path=golden / "sessions.db", workspace=None, gateway="b")
    assert again.own_ids_restored == 1 and again.transcript_entries.updated == 0
    assert "1 own ids restored" in "\n".join(again.summary_lines())
    assert not ReceiptEvent.objects.filter(action="transcript_edit").exists()
    assert _covered_here("b")[KEY] is True
