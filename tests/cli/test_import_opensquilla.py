"""Importing the real OpenSquilla 0.3.0 database and workspace (``tests/golden/opensquilla-0.3.0``)."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from receipts_app.audit import Actor
from receipts_app.checkpoint import checkpoint_coverage_hash, checkpoint_turn_id
from receipts_app.importer import ImportSourceError, import_opensquilla
from receipts_app.ledger import LEDGER_FIELDS
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent
from receipts_app.requeue import requeue_receipt
from receipts_app.selectors import current_checkpoint_coverage
from sessions_app.models import Session, TranscriptEntry
from sessions_app.services import append_message, get_transcript
from tests.factories import make_session
from tests.receipts_app.requeue_support import sent_fixture  # noqa: F401

pytestmark = pytest.mark.django_db

CHECKPOINT_FAILED_ID = "0398896d-9bf1-4a04-8a4d-57546d9e68c2"
REPAIR_ABANDONED_ID = "a5f742b0-eecd-4e6e-80ce-a32f8d945e8f"


@pytest.fixture
def golden(golden_dir) -> Path:
    return golden_dir / "opensquilla-0.3.0"


@pytest.fixture
def target(tmp_path, settings) -> Path:
    root = tmp_path / "ours"
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(root)
    settings.OPENSQUILLA_MEMORY_WORKSPACE = None
    return root


def source_rows(db: Path, sql: str) -> list[dict]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql)]
    finally:
        conn.close()


def run(golden: Path, db: Path | None = None, workspace: Path | None = None, **kwargs):
    return import_opensquilla(
        db_path=db or golden / "sessions.db",
        workspace=workspace if workspace is not None else golden / "workspace",
        **kwargs,
    )


def writable_copy(golden: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy.db"
    shutil.copyfile(golden / "sessions.db", copy)
    return copy


def assert_nothing_imported(target: Path) -> None:
    assert Session.objects.count() == 0
    assert TranscriptEntry.objects.count() == 0
    assert MemoryDurableReceipt.objects.count() == 0
    assert not target.exists() or not any(p.is_file() for p in target.rglob("*"))


def test_every_session_entry_and_receipt_arrives_unchanged(golden, target):
    db = golden / "sessions.db"
    report = run(golden)

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
    assert Session.objects.get(session_key="agent:ops:discord:group:1").agent_id == "ops"

    entries = source_rows(db, "SELECT * FROM transcript_entries ORDER BY id")
    assert report.transcript_entries.created == len(entries) == TranscriptEntry.objects.count()
    ours_by_id = {e.id: e for e in TranscriptEntry.objects.all()}
    for src in entries:
        ours = ours_by_id[src["id"]]  # upstream ids are kept
        assert ours.session_id == src["session_id"]
        assert ours.message_id == src["message_id"]
        assert (ours.role, ours.content, ours.tool_call_id) == (
            src["role"],
            src["content"],
            src["tool_call_id"],
        )
        assert ours.reasoning_content == src["reasoning_content"]
        assert ours.token_count == src["token_count"]
        assert ours.created_at == src["created_at"]
        expected_calls = json.loads(src["tool_calls"]) if src["tool_calls"] else None
        assert ours.tool_calls == expected_calls
    assert any(e.tool_calls for e in ours_by_id.values())

    receipts = source_rows(db, "SELECT * FROM memory_durable_receipts")
    assert report.receipts.created == len(receipts) == MemoryDurableReceipt.objects.count()
    for src in receipts:
        ours = MemoryDurableReceipt.objects.get(receipt_id=src["receipt_id"])
        for name in LEDGER_FIELDS:
            assert getattr(ours, name) == src[name], name


def test_imported_checkpoints_verify_against_the_imported_transcript_and_files(golden, target):
    run(golden)
    verified = 0
    for receipt in MemoryDurableReceipt.objects.filter(status="checkpoint_saved"):
        session = Session.objects.get(session_key=receipt.session_key)
        assert receipt.session_id == session.session_id  # every golden checkpoint is live
        through = int(receipt.coverage_turn_id.removeprefix("through-"))
        covered = [e for e in get_transcript(session.session_id) if e.id <= through]
        assert checkpoint_turn_id(covered) == receipt.coverage_turn_id
        assert checkpoint_coverage_hash(covered) == receipt.coverage_hash
        assert len(covered) == receipt.coverage_entry_count
        copied = target / receipt.source_path
        assert hashlib.sha256(copied.read_bytes()).hexdigest() == receipt.content_hash
        verified += 1
    assert verified == 9

    for receipt in MemoryDurableReceipt.objects.filter(status="preimage_saved"):
        copied = target / receipt.target_path
        assert hashlib.sha256(copied.read_bytes()).hexdigest() == receipt.content_hash

    # The product's own exact-coverage lookup agrees: s1-0's checkpoint covers it.
    covering, count = current_checkpoint_coverage(
        Session.objects.get(session_key="agent:main:webchat:s1-0")
    )
    assert covering is not None and covering.receipt_id == "30dd194d-598e-4dcb-8d2f-b99a4611087a"
    assert count == 8


def test_second_import_changes_nothing(golden, target):
    first = run(golden)
    assert first.changed
    before = list(MemoryDurableReceipt.objects.order_by("id").values())
    entries_before = list(TranscriptEntry.objects.order_by("id").values())
    events_before = ReceiptEvent.objects.count()
    mtimes = {p: p.stat().st_mtime_ns for p in target.rglob("*") if p.is_file()}

    second = run(golden)

    assert not second.changed
    assert (second.sessions.unchanged, second.transcript_entries.unchanged) == (9, 140)
    assert second.receipts.unchanged == 21 and second.receipts.created == 0
    assert second.files.unchanged == first.files.copied and second.files.copied == 0
    assert list(MemoryDurableReceipt.objects.order_by("id").values()) == before
    assert list(TranscriptEntry.objects.order_by("id").values()) == entries_before
    assert ReceiptEvent.objects.count() == events_before
    assert {p: p.stat().st_mtime_ns for p in target.rglob("*") if p.is_file()} == mtimes


def test_one_summary_event_records_who_imported(golden, target):
    from receipts_app.audit import acting_as

    with acting_as(Actor("dana", "cli")):
        run(golden)
    events = list(ReceiptEvent.objects.filter(action="import"))
    assert len(events) == 1
    assert (events[0].actor, events[0].surface) == ("dana", "cli")
    assert "21 created" in events[0].details["receipts"]


def _truncated(golden: Path, tmp_path: Path) -> Path:
    path = tmp_path / "truncated.db"
    data = (golden / "sessions.db").read_bytes()
    path.write_bytes(data[: len(data) // 3])
    return path


def _scribbled(golden: Path, tmp_path: Path) -> Path:
    path = tmp_path / "corrupt.db"
    data = bytearray((golden / "sessions.db").read_bytes())
    data[4096 * 3 : 4096 * 12] = b"\xff" * (4096 * 9)
    path.write_bytes(bytes(data))
    return path


def _garbage(golden: Path, tmp_path: Path) -> Path:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a database at all\n" * 100)
    return path


def _empty(golden: Path, tmp_path: Path) -> Path:
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    return path


def _other_sqlite(golden: Path, tmp_path: Path) -> Path:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE sessions (id INTEGER PRIMARY KEY, name TEXT)")
    conn.commit()
    conn.close()
    return path


def _missing(golden: Path, tmp_path: Path) -> Path:
    return tmp_path / "nope" / "sessions.db"


@pytest.mark.parametrize(
    "make_source, message",
    [
        (_truncated, "corrupt|cannot be read|malformed"),
        (_scribbled, "corrupt|cannot be read|malformed"),
        (_garbage, "not an SQLite database"),
        (_empty, "not an SQLite database"),
        (_other_sqlite, "not an OpenSquilla sessions database"),
        (_missing, "does not exist"),
    ],
    ids=["truncated", "corrupt-pages", "garbage", "empty", "other-sqlite", "missing"],
)
def test_bad_source_is_a_clear_error_and_imports_nothing(
    golden, target, tmp_path, make_source, message
):
    source = make_source(golden, tmp_path)
    with pytest.raises(ImportSourceError, match=message):
        run(golden, db=source)
    assert_nothing_imported(target)


def test_bad_value_midway_rolls_back_every_row(golden, target, tmp_path):
    db = writable_copy(golden, tmp_path)
    conn = sqlite3.connect(db)
    # The last receipt is broken: sessions and entries were already written when it is read.
    conn.execute(
        "UPDATE memory_durable_receipts SET created_at = 'yesterday' WHERE receipt_id = ?",
        (CHECKPOINT_FAILED_ID,),
    )
    conn.commit()
    conn.close()
    with pytest.raises(ImportSourceError, match=f"receipt {CHECKPOINT_FAILED_ID}: created_at"):
        run(golden, db=db)
    assert_nothing_imported(target)


def test_source_without_coverage_columns_imports_with_null_coverage(golden, target, tmp_path):
    db = writable_copy(golden, tmp_path)
    conn = sqlite3.connect(db)
    conn.execute("DROP INDEX idx_memory_durable_receipts_coverage")
    for column in ("coverage_turn_id", "coverage_hash", "coverage_entry_count"):
        conn.execute(f"ALTER TABLE memory_durable_receipts DROP COLUMN {column}")
    conn.commit()
    conn.close()

    report = run(golden, db=db)

    assert report.receipts.created == 21
    assert not report.coverage_columns_present
    saved = MemoryDurableReceipt.objects.filter(status="checkpoint_saved")
    assert saved.count() == 9
    assert all(
        (r.coverage_turn_id, r.coverage_hash, r.coverage_entry_count) == (None, None, None)
        for r in saved
    )


@pytest.mark.parametrize(
    "column, path",
    [
        ("source_path", "../../etc/passwd"),
        ("source_path", "memory/.checkpoints/../../../outside.jsonl"),
        ("target_path", "/etc/shadow"),
        ("target_path", "memory/.raw_fallbacks/x\x00.md"),
    ],
)
def test_receipt_path_escaping_the_workspace_is_refused(golden, target, tmp_path, column, path):
    db = writable_copy(golden, tmp_path)
    conn = sqlite3.connect(db)
    conn.execute(
        f"UPDATE memory_durable_receipts SET {column} = ? WHERE receipt_id = ?",
        (path, "30dd194d-598e-4dcb-8d2f-b99a4611087a"),
    )
    conn.commit()
    conn.close()
    with pytest.raises(ImportSourceError, match="30dd194d.*(import refused|NUL character)"):
        run(golden, db=db)
    assert_nothing_imported(target)


def test_symlinks_in_the_workspace_are_not_followed(golden, target, tmp_path):
    workspace = tmp_path / "ws"
    shutil.copytree(golden / "workspace", workspace)
    secret = tmp_path / "secret.txt"
    secret.write_text("do not copy me")
    (workspace / "memory/.checkpoints/leak.jsonl").symlink_to(secret)

    report = run(golden, workspace=workspace)

    assert report.files.refused == 1
    assert not (target / "memory/.checkpoints/leak.jsonl").exists()
    assert report.files.copied == 14


def test_raw_fallbacks_go_to_each_agents_memory_workspace(golden, target, tmp_path, settings):
    settings.OPENSQUILLA_MEMORY_WORKSPACE = str(tmp_path / "agents" / "{agent}")
    run(golden)
    ops = tmp_path / "agents/ops/memory/.raw_fallbacks"
    main = tmp_path / "agents/main/memory/.raw_fallbacks"
    assert [p.name for p in ops.iterdir()] == [
        "2026-11-29-agent-Ops-discord-group-1-preimage-72a7826f263ff0cf.md"
    ]
    assert len(list(main.iterdir())) == 4
    assert len(list((target / "memory/.checkpoints").rglob("*.jsonl"))) == 9


def test_a_conflicting_local_file_is_kept_not_replaced(golden, target):
    mine = target / "memory/.checkpoints/agent-main-webchat-s1-0/cmp_3fe31d03.jsonl"
    mine.parent.mkdir(parents=True)
    mine.write_text("local bytes\n")
    report = run(golden)
    assert report.files.conflicts == 1
    assert mine.read_text() == "local bytes\n"


def test_an_id_of_ours_taken_locally_renumbers_nothing_imported(golden, target):
    session = make_session("agent:main:webchat:local")
    entry = append_message(session.session_key, role="user", content="mine")
    TranscriptEntry.objects.filter(pk=entry.pk).update(id=5)

    report = run(golden)

    assert report.transcript_entries.created == 140
    assert TranscriptEntry.objects.get(id=5).content == "mine"
    # The imported entry 5 keeps its own id (under an id of ours), so s1-0 stays covered.
    imported = TranscriptEntry.objects.exclude(id=5)
    assert sorted(imported.values_list("gateway_entry_id", flat=True)) == list(range(1, 141))
    covering, _ = current_checkpoint_coverage(
        Session.objects.get(session_key="agent:main:webchat:s1-0")
    )
    assert covering is not None and covering.coverage_turn_id == "through-8"
    assert not any("new ids" in w for w in report.warnings)
    # A second run finds every entry again instead of duplicating it.
    again = run(golden)
    assert again.transcript_entries.unchanged == 140 and again.transcript_entries.created == 0


def test_imported_failures_can_be_requeued(
    golden, target, django_capture_on_commit_callbacks, sent
):
    run(golden)
    operator = Actor("erin", "cli")
    with django_capture_on_commit_callbacks(execute=True):
        failed = requeue_receipt(receipt_id=CHECKPOINT_FAILED_ID, actor=operator, reason="import")
        abandoned = requeue_receipt(receipt_id=REPAIR_ABANDONED_ID, actor=operator, reason="import")
    assert (str(failed.outcome), str(abandoned.outcome)) == ("requeued", "requeued")
    assert MemoryDurableReceipt.objects.get(receipt_id=CHECKPOINT_FAILED_ID).status == (
        "checkpoint_requeued"
    )
    repaired = MemoryDurableReceipt.objects.get(receipt_id=REPAIR_ABANDONED_ID)
    assert (repaired.status, repaired.attempt_count) == ("repair_pending", 0)
    assert sorted(name for name, *_ in sent) == ["checkpoint_session", "repair_receipt"]


def test_reimport_never_undoes_a_local_requeue(golden, target):
    run(golden)
    requeue_receipt(receipt_id=REPAIR_ABANDONED_ID, actor=Actor("erin", "cli"))
    report = run(golden)
    assert report.receipts.skipped == 1
    assert MemoryDurableReceipt.objects.get(receipt_id=REPAIR_ABANDONED_ID).status == (
        "repair_pending"
    )


def test_command_prints_counts_and_a_progress_bar(golden, target):
    out, err = StringIO(), StringIO()
    call_command(
        "import_opensquilla",
        str(golden / "sessions.db"),
        "--workspace",
        str(golden / "workspace"),
        stdout=out,
        stderr=err,
    )
    assert "receipts: 21 created, 0 updated, 0 unchanged, 0 skipped" in out.getvalue()
    assert "files: 14 copied" in out.getvalue()
    assert "21/21" in err.getvalue() and "140/140" in err.getvalue()

    out = StringIO()
    call_command(
        "import_opensquilla",
        str(golden / "sessions.db"),
        "--workspace",
        str(golden / "workspace"),
        "--no-progress",
        stdout=out,
    )
    assert "nothing to do: already imported" in out.getvalue()


def test_messages_appended_after_import_get_fresh_ids_and_uncover_the_checkpoint(golden, target):
    run(golden)
    entry = append_message("agent:main:webchat:s1-0", role="user", content="after the import")
    assert entry.id > 140  # the id sequence moved past the imported ids
    covering, count = current_checkpoint_coverage(
        Session.objects.get(session_key="agent:main:webchat:s1-0")
    )
    assert covering is None and count == 9
