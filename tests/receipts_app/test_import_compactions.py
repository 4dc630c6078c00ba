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
