"""Importing ledgers written by upstream's own storage at 0.3.0, 0.5.3 and HEAD.

The 0.5.3 and HEAD databases were written by ``bench/make_golden_head.py`` (see
``tests/golden/README.md``); they carry a later schema (more tables, more session and
transcript columns, yoyo's migration tables) around the same ledger tables.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from receipts_app.checkpoint import checkpoint_coverage_hash, checkpoint_turn_id
from receipts_app.importer import import_opensquilla, read_schema_version, read_schema_version_at
from receipts_app.ledger import LEDGER_FIELDS
from receipts_app.models import MemoryDurableReceipt
from receipts_app.selectors import current_checkpoint_coverage
from sessions_app.models import Session, TranscriptEntry
from sessions_app.services import get_transcript

pytestmark = pytest.mark.django_db

# release -> (storage SCHEMA_VERSION, newest yoyo migration, migrations applied)
RELEASES = {
    "0.3.0": (7, None, 0),
    "0.5.3": (21, "V035__pending_chat_inputs", 36),
    "head": (25, "V040__document_resources", 41),
}
STREAMED_MESSAGE_ID = "stream-answer-1"
FINAL_TEXT = "The deploy window is Friday 18:00 UTC; rollbacks need two approvals."


def unpack(golden_dir: Path, release: str, tmp_path: Path) -> tuple[Path, Path]:
    """The release's sessions.db (unpacked into ``tmp_path`` when gzipped) and workspace."""
    folder = golden_dir / f"opensquilla-{release}"
    plain = folder / "sessions.db"
    if plain.exists():
        return plain, folder / "workspace"
    db = tmp_path / f"{release}-sessions.db"
    with gzip.open(folder / "sessions.db.gz", "rb") as packed, db.open("wb") as out:
        shutil.copyfileobj(packed, out)
    return db, folder / "workspace"


def source_rows(db: Path, sql: str) -> list[dict]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql)]
    finally:
        conn.close()


@pytest.fixture
def target(tmp_path, settings) -> Path:
    root = tmp_path / "ours"
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(root)
    settings.OPENSQUILLA_MEMORY_WORKSPACE = None
    return root


@pytest.mark.parametrize("release", RELEASES)
def test_the_schema_version_is_read_from_the_file(golden_dir, tmp_path, release):
    db, _ = unpack(golden_dir, release, tmp_path)
    version, latest, applied = RELEASES[release]

    schema = read_schema_version_at(db)

    assert schema.storage_version == version
    assert schema.latest_migration == latest
    assert len(schema.migrations) == applied
    assert not schema.newer_than_known


@pytest.mark.parametrize("release", RELEASES)
def test_every_row_of_each_release_arrives_unchanged(golden_dir, tmp_path, target, release):
    db, workspace = unpack(golden_dir, release, tmp_path)

    report = import_opensquilla(db_path=db, workspace=workspace)

    version, latest, _ = RELEASES[release]
    assert report.source_schema == (f"{version} ({latest})" if latest else str(version))
    assert report.warnings == []
    sessions = source_rows(db, "SELECT * FROM sessions")
    assert report.sessions.created == len(sessions) == Session.objects.count()
    for src in sessions:
        ours = Session.objects.get(session_key=src["session_key"])
        assert (ours.session_id, ours.epoch, ours.created_at, ours.updated_at) == (
            src["session_id"],
            src["epoch"],
            src["created_at"],
            src["updated_at"],
        )
    entries = source_rows(db, "SELECT * FROM transcript_entries ORDER BY id")
    assert report.transcript_entries.created == len(entries) == TranscriptEntry.objects.count()
    ours_by_id = {e.id: e for e in TranscriptEntry.objects.all()}
    for src in entries:
        ours = ours_by_id[src["id"]]
        assert (ours.session_id, ours.message_id, ours.role, ours.content) == (
            src["session_id"],
            src["message_id"],
            src["role"],
            src["content"],
        )
        assert ours.created_at == src["created_at"]
        assert ours.tool_calls == (json.loads(src["tool_calls"]) if src["tool_calls"] else None)
    receipts = source_rows(db, "SELECT * FROM memory_durable_receipts")
    assert report.receipts.created == len(receipts) == MemoryDurableReceipt.objects.count()
    for src in receipts:
        ours = MemoryDurableReceipt.objects.get(receipt_id=src["receipt_id"])
        for name in LEDGER_FIELDS:
            assert getattr(ours, name) == src[name], name


@pytest.mark.parametrize("release", ["0.5.3", "head"])
def test_later_releases_bring_every_status_and_their_files(golden_dir, tmp_path, target, release):
    db, workspace = unpack(golden_dir, release, tmp_path)

    import_opensquilla(db_path=db, workspace=workspace)

    statuses = set(MemoryDurableReceipt.objects.values_list("status", flat=True))
    assert statuses == {
        "checkpoint_saved",
        "checkpoint_failed",
        "preimage_saved",
        "repair_abandoned",
        "repair_done",
    }
    for receipt in MemoryDurableReceipt.objects.filter(status="checkpoint_saved"):
        session = Session.objects.get(session_key=receipt.session_key)
        through = int(receipt.coverage_turn_id.removeprefix("through-"))
        covered = [e for e in get_transcript(session.session_id) if e.id <= through]
        assert checkpoint_turn_id(covered) == receipt.coverage_turn_id
        assert checkpoint_coverage_hash(covered) == receipt.coverage_hash
        copied = target / receipt.source_path
        assert hashlib.sha256(copied.read_bytes()).hexdigest() == receipt.content_hash
    assert Session.objects.get(session_key="agent:ops:discord:group:7").agent_id == "ops"


def test_heads_message_updated_in_place_arrives_as_it_now_is(golden_dir, tmp_path, target):
    db, workspace = unpack(golden_dir, "head", tmp_path)
    (src,) = source_rows(
        db, f"SELECT * FROM transcript_entries WHERE message_id = '{STREAMED_MESSAGE_ID}'"
    )

    import_opensquilla(db_path=db, workspace=workspace)

    ours = TranscriptEntry.objects.get(message_id=STREAMED_MESSAGE_ID)
    # Upstream rewrote the draft under its first id and creation time; so do we, once.
    assert (ours.id, ours.created_at, ours.content) == (src["id"], src["created_at"], FINAL_TEXT)
    session = Session.objects.get(session_key="agent:main:webchat:head-1")
    covering, count = current_checkpoint_coverage(session)
    assert covering is not None and covering.turn_id == "cmp_head_1"
    assert count == 4


def test_a_newer_schema_still_imports_and_says_so(golden_dir, tmp_path, target):
    db, workspace = unpack(golden_dir, "head", tmp_path)
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("ALTER TABLE sessions ADD COLUMN future_column TEXT DEFAULT 'x'")
        conn.execute("ALTER TABLE transcript_entries ADD COLUMN future_flag INTEGER")
        conn.execute("CREATE TABLE future_things (id INTEGER PRIMARY KEY)")
        conn.execute(
            "INSERT INTO _yoyo_migration (migration_hash, migration_id, applied_at_utc)"
            " VALUES ('f', 'V041__future_things', '2027-01-01')"
        )
    conn.close()

    report = import_opensquilla(db_path=db, workspace=workspace)

    assert report.source_schema == "25 (V041__future_things)"
    assert any("newer than this product knows" in w for w in report.warnings)
    assert report.transcript_entries.created == TranscriptEntry.objects.count() == 10


def test_a_file_the_storage_alone_wrote_has_no_migrations(tmp_path):
    # The 0.3.0 storage without a gateway boot: no yoyo tables, version from the tables.
    db = tmp_path / "bare.db"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE sessions (session_key TEXT, epoch INTEGER)")
    conn.execute("CREATE TABLE transcript_entries (id INTEGER, reasoning_content TEXT)")
    schema = read_schema_version(conn)
    conn.close()

    assert (schema.storage_version, schema.migrations, schema.label()) == (3, (), "3")
    with pytest.raises(sqlite3.DatabaseError):
        read_schema_version_at(tmp_path / "missing.db")


def test_a_reimport_after_an_in_place_edit_updates_the_row_and_reanswers_coverage(
    golden_dir, tmp_path, target
):
    db, workspace = unpack(golden_dir, "head", tmp_path)
    import_opensquilla(db_path=db, workspace=workspace)
    session = Session.objects.get(session_key="agent:main:webchat:head-1")
    assert current_checkpoint_coverage(session)[0] is not None
    # What upstream's upsert_transcript_entry_and_touch does to a finalised message again:
    # the same row, id and created_at kept, new text, and the session touched.
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(
            "UPDATE transcript_entries SET content = 'Edited: the window moved to Monday.'"
            " WHERE message_id = ?",
            (STREAMED_MESSAGE_ID,),
        )
        conn.execute(
            "UPDATE sessions SET updated_at = updated_at + 1 WHERE session_key = ?",
            (session.session_key,),
        )
    conn.close()
    before = TranscriptEntry.objects.get(message_id=STREAMED_MESSAGE_ID)

    report = import_opensquilla(db_path=db, workspace=workspace)

    assert (report.transcript_entries.updated, report.transcript_entries.created) == (1, 0)
    after = TranscriptEntry.objects.get(message_id=STREAMED_MESSAGE_ID)
    assert (after.id, after.created_at) == (before.id, before.created_at)
    assert after.content == "Edited: the window moved to Monday."
    # The checkpoint hashed the old text: it no longer covers the transcript as it now is.
    covering, _ = current_checkpoint_coverage(Session.objects.get(pk=session.pk))
    assert covering is None
