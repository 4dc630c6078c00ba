"""Degraded compaction summaries arrive with an OpenSquilla import and get repaired."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from receipts_app import repair
from receipts_app.importer import import_opensquilla
from sessions_app.models import CompactedTranscriptEntry, CompactionSummary
from tests.receipts_app.test_repair import CandidateProvider

pytestmark = pytest.mark.django_db

SESSION_KEY = "agent:main:webchat:s1-0"


def _with_degraded_compaction(golden_dir: Path, tmp_path: Path) -> Path:
    """The reference database plus one compaction whose pre-compaction flush degraded."""
    db = tmp_path / "sessions.db"
    shutil.copyfile(golden_dir / "opensquilla-0.3.0" / "sessions.db", db)
    conn = sqlite3.connect(db)
    with conn:
        (session_id,) = conn.execute(
            "SELECT session_id FROM sessions WHERE session_key = ?", (SESSION_KEY,)
        ).fetchone()
        conn.execute(
            "INSERT INTO session_summaries (session_id, session_key, compaction_index,"
            " compaction_id, trigger_reason, summary_text, removed_count, kept_count,"
            " flush_receipt_status, covered_through_id, created_at)"
            " VALUES (?, ?, 1, 'cmp-1', 'preflight', 'summary', 2, 1,"
            " 'degraded_forensic', 9, 1700000000000)",
            (session_id, SESSION_KEY),
        )
        for entry_id, role, text in ((8, "user", "we deploy on fridays"), (9, "assistant", "ok")):
            conn.execute(
                "INSERT INTO compacted_transcript_entries (session_id, session_key,"
                " compaction_id, compaction_index, original_entry_id, message_id, role,"
                " content, created_at, archived_at)"
                " VALUES (?, ?, 'cmp-1', 1, ?, ?, ?, ?, ?, 1700000000500)",
                (session_id, SESSION_KEY, entry_id, f"m{entry_id}", role, text, 1700000000000),
            )
    conn.close()
    return db


def test_imported_degraded_compaction_is_repaired_and_stays_repaired(
    golden_dir, tmp_path, settings, monkeypatch
):
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(tmp_path / "ours")
    settings.OPENSQUILLA_MEMORY_WORKSPACE = str(tmp_path / "memory" / "{agent}")
    monkeypatch.setattr(
        "receipts_app.flush_runtime.provider_selector", lambda agent: CandidateProvider()
    )
    db = _with_degraded_compaction(golden_dir, tmp_path)

    import_opensquilla(db_path=db, workspace=None)
    summary = CompactionSummary.objects.get(compaction_id="cmp-1")
    assert (summary.session_key, summary.flush_receipt_status) == (
        SESSION_KEY,
        "degraded_forensic",
    )

    tick = repair.run_repair_tick()
    summary.refresh_from_db()
    # The reference database's own repair rows are processed too; the summary comes first.
    assert (tick["processed"][0]["sourceType"], tick["processed"][0]["status"]) == (
        "compaction_preimage",
        "repaired",
    )
    assert summary.flush_receipt_status == "repaired"

    # Importing again (a mirror follows the source) keeps the repair and adds nothing.
    import_opensquilla(db_path=db, workspace=None)
    assert CompactionSummary.objects.get().flush_receipt_status == "repaired"
    assert CompactedTranscriptEntry.objects.count() == 2


def test_compaction_rows_with_a_control_character_in_a_key_are_skipped_and_reported(
    golden_dir, tmp_path
):
    db = _with_degraded_compaction(golden_dir, tmp_path)
    conn = sqlite3.connect(db)
    with conn:
        (session_id,) = conn.execute(
            "SELECT session_id FROM sessions WHERE session_key = ?", (SESSION_KEY,)
        ).fetchone()
        bad = [  # (session_key, session_id, compaction_id): one control character each
            ("agent:main:webchat:x\nsecond-line", session_id, "cmp-key"),
            (SESSION_KEY, "sid\r\nSet-Cookie: x=y", "cmp-sid"),
            (SESSION_KEY, session_id, "cmp\x00nul"),
        ]
        for index, (key, sid, cid) in enumerate(bad, start=2):
            conn.execute(
                "INSERT INTO session_summaries (session_id, session_key, compaction_index,"
                " compaction_id, trigger_reason, summary_text, removed_count, kept_count,"
                " flush_receipt_status, covered_through_id, created_at)"
                " VALUES (?, ?, ?, ?, 'preflight', 'summary', 1, 1,"
                " 'degraded_forensic', 9, 1700000000000)",
                (sid, key, index, cid),
            )
            conn.execute(
                "INSERT INTO compacted_transcript_entries (session_id, session_key,"
                " compaction_id, compaction_index, original_entry_id, message_id, role,"
                " content, created_at, archived_at)"
                " VALUES (?, ?, ?, ?, 8, 'm8', 'user', 'text', 1700000000000, 1700000000500)",
                (sid, key, cid, index),
            )
    conn.close()

    report = import_opensquilla(db_path=db, workspace=None)

    # Only the good compaction and its two pre-image entries are stored.
    assert list(CompactionSummary.objects.values_list("compaction_id", flat=True)) == ["cmp-1"]
    assert set(CompactedTranscriptEntry.objects.values_list("compaction_id", flat=True)) == {
        "cmp-1"
    }
    assert CompactedTranscriptEntry.objects.count() == 2
    assert report.compactions_skipped == 6
    assert "compactions: 6 skipped" in report.summary_lines()
    warnings = [w for w in report.warnings if w.startswith("compact")]
    assert len(warnings) == 6 and all(w.endswith("not imported") for w in warnings)
    assert any(
        w.startswith("compaction summary at source rowid")
        and "session_key must not contain control characters" in w
        and "U+000A" in w
        for w in warnings
    )
    assert any("session_id must not contain" in w and "U+000D" in w for w in warnings)
    assert any(
        w.startswith("compacted transcript entry") and "compaction_id must not contain" in w
        for w in warnings
    )

    # Again: skipped again, nothing stored, nothing fails.
    again = import_opensquilla(db_path=db, workspace=None)
    assert again.compactions_skipped == 6
    assert CompactionSummary.objects.count() == 1
