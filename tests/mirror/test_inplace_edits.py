"""The mirror follows transcript rows that upstream rewrites in place (after 0.5.3, #1199).

The database is the HEAD ledger written by upstream's own storage (``tests/golden/
opensquilla-head``, recipe ``bench/make_golden_head.py``). The edit is what upstream HEAD's
``SessionStorage.upsert_transcript_entry_and_touch`` commits for a message written again
under its ``message_id``: one transaction that rewrites every column of the matched row but
``id`` and ``created_at``, and touches the session (``updated_at``) under its epoch.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from receipts_app.importer import import_opensquilla
from receipts_app.mirror.follower import Follower
from receipts_app.models import ReceiptEvent
from receipts_app.selectors import current_checkpoint_coverage
from sessions_app.gateways import Gateway
from sessions_app.models import Session, TranscriptEntry
from tests.cli.test_import_upstream_releases import FINAL_TEXT, STREAMED_MESSAGE_ID, unpack

pytestmark = pytest.mark.django_db

STREAMED = "agent:main:webchat:head-1"
OTHER = "agent:ops:discord:group:7"
EDITED = "Correction: the deploy window is Monday 09:00 UTC."


def upstream_rewrite(db: Path, session_key: str, message_id: str, content: str) -> int:
    """Upstream HEAD's in-place rewrite, statement for statement; returns the row's id."""
    conn = sqlite3.connect(db)
    try:
        with conn:
            (session_id, epoch, stamp) = conn.execute(
                "SELECT session_id, epoch, updated_at FROM sessions WHERE session_key = ?",
                (session_key,),
            ).fetchone()
            (entry_id,) = conn.execute(
                "SELECT id FROM transcript_entries WHERE session_id = ? AND message_id = ?"
                " ORDER BY id ASC LIMIT 1",
                (session_id, message_id),
            ).fetchone()
            conn.execute(
                "UPDATE transcript_entries SET content = ? WHERE id = ?", (content, entry_id)
            )
            conn.execute(
                "UPDATE sessions SET updated_at = ?, total_tokens = total_tokens + 0"
                " WHERE session_key = ? AND epoch = ?",
                (stamp + 1000, session_key, epoch),
            )
    finally:
        conn.close()
    return int(entry_id)


@pytest.fixture
def head_db(golden_dir, tmp_path, settings) -> tuple[Path, Path]:
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(tmp_path / "ours")
    settings.OPENSQUILLA_MEMORY_WORKSPACE = None
    return unpack(golden_dir, "head", tmp_path)


def follower(db: Path, gateway: str = "local") -> Follower:
    return Follower(
        db_path=db,
        workspace=None,
        checkpoint_root=None,
        memory_template=None,
        interval=0.1,
        owner="edit-test",
        gateway=gateway,
    )


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_the_mirror_follows_an_edit_in_place_and_reanswers_coverage(head_db, reader, viewer_client):
    db, _ = head_db
    f = follower(db)
    assert f.poll() == "synced"
    session = Session.objects.get(session_key=STREAMED)
    streamed = TranscriptEntry.objects.get(message_id=STREAMED_MESSAGE_ID)
    assert streamed.content == FINAL_TEXT
    covering, _ = current_checkpoint_coverage(session)
    assert covering is not None and covering.turn_id == "cmp_head_1"
    assert f.poll() == "idle"

    entry_id = upstream_rewrite(db, STREAMED, STREAMED_MESSAGE_ID, EDITED)
    assert f.poll() == "synced"

    after = TranscriptEntry.objects.get(message_id=STREAMED_MESSAGE_ID)
    assert (after.id, after.created_at, after.content) == (entry_id, streamed.created_at, EDITED)
    assert TranscriptEntry.objects.filter(session_key=STREAMED).count() == 4
    # The checkpoint hashed the old text: the session is no longer covered.
    assert current_checkpoint_coverage(Session.objects.get(pk=session.pk))[0] is None
    coverage = reader.get(f"/sessions/{STREAMED}/coverage").json()
    assert (coverage["covered"], coverage["entry_count"]) == (False, 4)
    transcript = reader.get(f"/sessions/{STREAMED}/transcript").json()
    assert EDITED in json.dumps(transcript) and FINAL_TEXT not in json.dumps(transcript)
    page = viewer_client.get(f"/sessions/s/{STREAMED}").content.decode()
    assert "Monday 09:00 UTC" in page and "Friday 18:00" not in page
    panel = viewer_client.get("/session-memory/", {"key": STREAMED}).content.decode()
    assert "Not covered." in panel

    (event,) = ReceiptEvent.objects.filter(action="transcript_edit")
    assert (event.session_key, event.receipt_id, event.actor) == (
        STREAMED,
        "",
        "opensquilla-mirror",
    )
    assert event.details["entry_id"] == entry_id
    assert event.details["message_id"] == STREAMED_MESSAGE_ID
    assert event.details["fields"] == ["content"]
    assert event.details["old_content_sha256"] == sha(FINAL_TEXT)
    assert event.details["new_content_sha256"] == sha(EDITED)
    assert event.details["covered_before"] == covering.receipt_id
    assert event.details["covered_after"] is None
    assert covering.receipt_id in event.reason and "no longer covers" in event.reason
    assert FINAL_TEXT not in json.dumps(event.details) and EDITED not in json.dumps(event.details)
    audit_page = viewer_client.get("/audit/").content.decode()
    assert "transcript_edit" in audit_page

    # Nothing more to do: the same edit is not applied or audited twice.
    assert f.poll() == "idle"
    f.watch.forget_version()
    f.poll()
    assert ReceiptEvent.objects.filter(action="transcript_edit").count() == 1


def test_only_the_edited_session_is_read_again(head_db):
    db, _ = head_db
    f = follower(db)
    f.poll()
    reads = f.watch.db.reads
    assert reads["entries_reread"] == 0  # the initial pass needs no second look

    # Another session gets a new message (appended, nothing rewritten): not read again.
    conn = sqlite3.connect(db)
    with conn:
        (sid,) = conn.execute(
            "SELECT session_id FROM sessions WHERE session_key = ?", (OTHER,)
        ).fetchone()
        conn.execute(
            "INSERT INTO transcript_entries (session_id, session_key, message_id, role, content,"
            " created_at) VALUES (?, ?, 'm-new', 'user', 'one more', 1)",
            (sid, OTHER),
        )
        conn.execute(
            "UPDATE sessions SET updated_at = updated_at + 1000 WHERE session_key = ?", (OTHER,)
        )
    conn.close()
    assert f.poll() == "synced"
    assert reads["entries_reread"] == 0
    assert TranscriptEntry.objects.filter(session_key=OTHER).count() == 5

    upstream_rewrite(db, STREAMED, STREAMED_MESSAGE_ID, EDITED)
    assert f.poll() == "synced"
    # Exactly the edited session's rows (4), not the other sessions' (6).
    assert reads["entries_reread"] == 4
    assert TranscriptEntry.objects.get(message_id=STREAMED_MESSAGE_ID).content == EDITED
    # The touched sessions' fingerprints were asked of SQLite, not rows: one query a pass.
    assert reads["fingerprint_queries"] == 3


def test_an_edit_that_keeps_every_length_is_found_by_the_digest(head_db, monkeypatch):
    db, _ = head_db
    monkeypatch.setattr("receipts_app.mirror.sync.STRONG_CHECK_MS", 10**12)
    f = follower(db)
    f.poll()
    reads = f.watch.db.reads
    same_length = FINAL_TEXT.replace("Friday", "Sunday")
    assert len(same_length) == len(FINAL_TEXT)

    # Within STRONG_CHECK_MS of the last digest comparison only the native part is asked:
    # counts and lengths agree, so nothing is read again yet.
    upstream_rewrite(db, STREAMED, STREAMED_MESSAGE_ID, same_length)
    assert f.poll() == "synced"
    assert reads["entries_reread"] == 0
    assert TranscriptEntry.objects.get(message_id=STREAMED_MESSAGE_ID).content == FINAL_TEXT

    # Once due, the put-off comparison runs though nothing else changed in the file: the
    # digest (every row hashed inside SQLite) differs, and only that session is read again.
    monkeypatch.setattr("receipts_app.mirror.sync.STRONG_CHECK_MS", 0)
    assert f.poll() == "synced"
    assert reads["strong_fingerprint_queries"] == 1
    assert reads["entries_reread"] == 4
    assert TranscriptEntry.objects.get(message_id=STREAMED_MESSAGE_ID).content == same_length
    (event,) = ReceiptEvent.objects.filter(action="transcript_edit")
    assert event.details["new_content_sha256"] == sha(same_length)
    assert f.poll() == "idle"  # nothing is put off any more


def test_a_reimport_of_an_edited_file_updates_audits_and_reanswers(head_db):
    db, workspace = head_db
    import_opensquilla(db_path=db, workspace=workspace)
    session = Session.objects.get(session_key=STREAMED)
    covering, _ = current_checkpoint_coverage(session)
    assert covering is not None
    upstream_rewrite(db, STREAMED, STREAMED_MESSAGE_ID, EDITED)

    report = import_opensquilla(db_path=db, workspace=workspace)

    assert report.transcript_entries.updated == 1
    assert TranscriptEntry.objects.get(message_id=STREAMED_MESSAGE_ID).content == EDITED
    (event,) = ReceiptEvent.objects.filter(action="transcript_edit")
    assert event.details["via"] == "import"
    assert (event.details["covered_before"], event.details["covered_after"]) == (
        covering.receipt_id,
        None,
    )
    assert event.details["new_content_sha256"] == sha(EDITED)
    assert current_checkpoint_coverage(Session.objects.get(pk=session.pk))[0] is None


def test_the_gateway_records_the_schema_each_reader_saw(golden_dir, tmp_path, reader):
    old_db, _ = unpack(golden_dir, "0.5.3", tmp_path)
    head, _ = unpack(golden_dir, "head", tmp_path)
    import_opensquilla(db_path=old_db, workspace=None, gateway="edge-old")
    f = follower(head, gateway="edge-head")
    f.poll()

    versions = {g.name: g.schema_version for g in Gateway.objects.all()}
    assert versions["edge-old"] == "21 (V035__pending_chat_inputs)"
    assert versions["edge-head"] == "25 (V040__document_resources)"
    listed = {g["name"]: g["schema_version"] for g in reader.get("/gateways").json()["items"]}
    assert listed["edge-head"] == "25 (V040__document_resources)"

    # The gateway is upgraded under the running follower: its migration lands in the file.
    conn = sqlite3.connect(head)
    with conn:
        conn.execute("CREATE TABLE future_things (id INTEGER PRIMARY KEY)")
        conn.execute(
            "INSERT INTO _yoyo_migration (migration_hash, migration_id, applied_at_utc)"
            " VALUES ('f', 'V041__future_things', '2027-01-01')"
        )
    conn.close()
    f.poll()
    assert Gateway.objects.get(name="edge-head").schema_version == "25 (V041__future_things)"


UPSTREAM_SRC = os.environ.get("OSQ_UPSTREAM_SRC", "")
REF_PYTHON = Path(__file__).resolve().parents[2] / "var" / "bench" / "ref-venv" / "bin" / "python"


# Optional: upstream's source is not something CI has (no marker of a CI service, so it skips
# there); the same edit, as upstream's storage writes it, is covered above on the golden file.
@pytest.mark.xdist_group("real-processes")
@pytest.mark.skipif(
    not (UPSTREAM_SRC and REF_PYTHON.exists()),
    reason="set OSQ_UPSTREAM_SRC to upstream HEAD's src/ (tests/golden/README.md) and build "
    "the reference venv (bash bench/reference_venv.sh)",
)
def test_upstream_heads_own_rewrite_is_followed(head_db):
    # Upstream HEAD's storage itself writes the edit (bench/make_golden_head.py --rewrite).
    db, _ = head_db
    f = follower(db)
    f.poll()
    recipe = Path(__file__).resolve().parents[2] / "bench" / "make_golden_head.py"
    done = subprocess.run(
        [
            sys.executable,
            str(recipe),
            "--upstream-src",
            UPSTREAM_SRC,
            "--rewrite",
            str(db),
            "--text",
            EDITED,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr

    assert f.poll() == "synced"
    assert TranscriptEntry.objects.get(message_id=STREAMED_MESSAGE_ID).content == EDITED
    assert TranscriptEntry.objects.filter(session_key=STREAMED).count() == 4
    assert f.watch.db.reads["entries_reread"] == 4
    (event,) = ReceiptEvent.objects.filter(action="transcript_edit")
    assert event.details["new_content_sha256"] == sha(EDITED)
    assert current_checkpoint_coverage(Session.objects.get(session_key=STREAMED))[0] is None


def _at_version(golden_dir: Path, tmp_path: Path, version: int) -> Path:
    """The 0.3.0 ledger (schema 7) widened to ``version`` the way upstream's storage does it:
    each later version's marker table or column added, every earlier row left as it was."""
    from receipts_app.importer.schema import STORAGE_VERSION_MARKERS

    folder = tmp_path / f"v{version}"
    folder.mkdir()
    for name in ("sessions.db", "sessions.db-wal", "sessions.db-shm"):
        shutil.copy(golden_dir / "opensquilla-0.3.0" / name, folder / name)
    conn = sqlite3.connect(folder / "sessions.db")
    with conn:
        for marker, table, column in STORAGE_VERSION_MARKERS:
            if not 7 < marker <= version:
                continue
            conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (id INTEGER PRIMARY KEY)")
            if column is not None:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} TEXT")
    conn.close()
    return folder / "sessions.db"


@pytest.mark.parametrize("version", range(7, 26))
def test_every_schema_from_0_3_0_to_25_is_read_and_recorded(
    golden_dir, tmp_path, version, viewer_client
):
    db = _at_version(golden_dir, tmp_path, version)
    name = f"v{version}"

    f = follower(db, gateway=name)
    assert f.poll() == "synced"

    assert Gateway.objects.get(name=name).schema_version == str(version)
    assert TranscriptEntry.objects.filter(gateway_id=name).count() == 140
    overview = viewer_client.get("/").content.decode()
    assert f"schema <code>{version}</code>" in overview
