"""The flush status classifier: upstream's meaning, and the rows each outcome writes."""

from __future__ import annotations

import pytest

from receipts_app.flush import (
    FlushReceipt,
    allows_destructive_compaction,
    classify_flush_receipt,
    flush_receipt_allows_destructive_compaction,
)
from receipts_app.flush.safety import ledger_row_fields
from receipts_app.flush_outcome import flush_outcome_for_row
from tests.factories import make_receipt

ARCHIVE = "memory/.raw_fallbacks/2026-05-29-flush.md"


def _archived(status: str = "parse_failed_archived", **extra) -> FlushReceipt:
    fields = {
        "mode": "raw",
        "flushed_paths": [ARCHIVE],
        "slug": None,
        "message_count": 1,
        "duration_ms": 1,
        "raw_reason": "llm_error",
        "error": None,
        "result_status": status,
        "content_hash": "a" * 64,
    }
    fields.update(extra)
    return FlushReceipt(**fields)


def test_archived_parse_failure_may_be_compacted_but_is_not_strictly_safe():
    receipt = _archived()

    status = classify_flush_receipt(receipt)

    # Upstream's compaction answer: the archive keeps the transcript, a repair is queued.
    assert allows_destructive_compaction(receipt) is True
    assert (status.safety_status, status.repair_status) == ("degraded_archive", "pending")
    # The strict predicate still refuses it: it writes a repair row, never flush_appended.
    assert flush_receipt_allows_destructive_compaction(receipt) is False
    row = ledger_row_fields(receipt, checkpoint_exists=True)
    assert row is not None and (row["scope"], row["status"], row["reason"]) == (
        "repair",
        "repair_pending",
        "parse_failed_archived",
    )


def test_archived_outcome_without_archive_evidence_is_unsafe():
    receipt = _archived(content_hash=None)

    status = classify_flush_receipt(receipt)

    assert status.safety_status == "unsafe"
    assert allows_destructive_compaction(receipt) is False


def test_archive_failure_is_unsafe_and_its_repair_failed():
    receipt = _archived(
        "archive_failed", mode="error", flushed_paths=[], raw_reason=None, error="disk full"
    )

    status = classify_flush_receipt(receipt)

    assert (status.safety_status, status.semantic_status, status.repair_status) == (
        "unsafe",
        "failed",
        "failed",
    )
    assert status.has_raw_archive is False


def test_not_required_flush_allows_compaction():
    status = classify_flush_receipt(None, required=False)

    assert (status.safety_status, status.semantic_status) == ("not_required", "not_required")
    assert status.allows_destructive_compaction is True


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"scope": "flush", "status": "flush_appended", "target_path": "memory/x.md"},
            ("safe", "safe", "none", True),
        ),
        (
            {
                "scope": "repair",
                "status": "repair_pending",
                "reason": "provider_failed_archived",
                "target_path": ARCHIVE,
                "content_hash": "b" * 64,
            },
            ("degraded_forensic", "degraded_archive", "pending", True),
        ),
        (
            {"scope": "checkpoint", "status": "checkpoint_failed", "reason": "archive_failed"},
            ("unsafe", "unsafe", "failed", False),
        ),
    ],
)
def test_ledger_row_reads_back_as_the_flush_outcome_it_records(fields, expected):
    row = make_receipt(session_key="agent:main:webchat:s1", **fields)

    outcome = flush_outcome_for_row(row)

    assert outcome is not None
    s = outcome.status
    assert (
        s.receipt_status,
        s.safety_status,
        s.repair_status,
        s.allows_destructive_compaction,
    ) == expected


@pytest.mark.django_db
def test_checkpoint_row_records_no_flush_outcome():
    row = make_receipt(session_key="agent:main:webchat:s1", status="checkpoint_saved")

    assert flush_outcome_for_row(row) is None


@pytest.mark.django_db
def test_repaired_row_says_its_repair_is_done_not_queued():
    row = make_receipt(
        session_key="agent:main:webchat:s1",
        scope="repair",
        status="repair_done",
        reason="ok_archive_only",
        target_path=ARCHIVE,
        content_hash="d" * 64,
    )

    outcome = flush_outcome_for_row(row)

    assert outcome is not None and outcome.status.repair_status == "pending"
    assert outcome.repair_text == "The raw archive has since been repaired into memory."
