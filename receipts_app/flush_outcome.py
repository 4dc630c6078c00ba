"""Explain a ledger row as the flush outcome it records, with upstream's classifier.

The ledger keeps the row a flush wrote, not the flush receipt itself. Each flush row comes
from exactly one kind of outcome (``flush.safety.ledger_row_fields``), so the outcome can be
read back from the row and classified with ``classify_flush_receipt``:

- ``flush`` / ``flush_appended``: written only for a strictly safe LLM write;
- ``repair`` rows whose reason is an archived result status (``ok_archive_only``,
  ``*_failed_archived``): a raw archive at ``target_path`` (or ``source_path`` for legacy
  imports), identified by ``content_hash``;
- rows with reason ``archive_failed``: the archive itself could not be written.

Any other row (checkpoints, pre-images, stale claims) records no flush outcome: ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .flush import FlushStatus, classify_flush_receipt
from .flush.status import RAW_ARCHIVE_PREFIX
from .flush.types import ARCHIVED_RESULT_STATUSES
from .models import MemoryDurableReceipt
from .statuses import FLUSH_APPENDED, REPAIR_ABANDONED, REPAIR_DONE, REPAIR_FAILED, REPAIR_RUNNING

# What each classification means to an operator deciding whether memory is at risk.
SAFETY_TEXT = {
    "safe": "The transcript was distilled into memory and every fact was verified.",
    "degraded_archive": (
        "The transcript is kept only as a raw archive; a repair will distil it into memory."
    ),
    "unsafe": "Nothing durable covers this transcript; compacting it would lose memory.",
}
REPAIR_TEXT = {
    "none": "No repair needed.",
    "pending": "A repair of the raw archive is queued.",
    "failed": "The raw archive could not be written; requeue once the workspace is fixed.",
}
# Where the repair the flush asked for has got to, told by the row's current status.
REPAIR_PROGRESS_TEXT = {
    REPAIR_RUNNING: "The raw archive is being repaired now.",
    REPAIR_DONE: "The raw archive has since been repaired into memory.",
    REPAIR_FAILED: "The last repair attempt failed; requeue to try again.",
    REPAIR_ABANDONED: "Repair gave up after four attempts; requeue to try again.",
}


@dataclass(frozen=True)
class FlushOutcome:
    """The classification (upstream's meaning) plus what it means for this row now."""

    status: FlushStatus
    safety_text: str
    repair_text: str


def _recorded_receipt(row: MemoryDurableReceipt) -> dict[str, Any] | None:
    reason = row.reason or ""
    if row.scope == "flush" and row.status == FLUSH_APPENDED:
        return {
            "mode": "llm",
            "result_status": "ok_candidates_written",
            "indexed_chunk_count": 1,
            "integrity_status": "ok",
            "output_coverage_status": "ok",
            "flushed_paths": [row.target_path] if row.target_path else [],
            "content_hash": row.content_hash,
        }
    if row.scope == "repair" and reason in ARCHIVED_RESULT_STATUSES:
        archive = next(
            (
                p
                for p in (row.target_path, row.source_path)
                if p and p.startswith(RAW_ARCHIVE_PREFIX)
            ),
            None,
        )
        return {
            "mode": "raw",
            "result_status": reason,
            "flushed_paths": [archive] if archive else [],
            "content_hash": row.content_hash,
        }
    if reason == "archive_failed":
        return {"mode": "error", "result_status": "archive_failed", "flushed_paths": []}
    return None


def flush_outcome_for_row(row: MemoryDurableReceipt) -> FlushOutcome | None:
    """The classified flush outcome a row records, or None when it records none."""
    recorded = _recorded_receipt(row)
    if recorded is None:
        return None
    status = classify_flush_receipt(recorded)
    repair_text = REPAIR_TEXT.get(status.repair_status, "")
    if status.repair_status == "pending":
        repair_text = REPAIR_PROGRESS_TEXT.get(row.status, repair_text)
    return FlushOutcome(
        status=status,
        safety_text=SAFETY_TEXT.get(status.safety_status, ""),
        repair_text=repair_text,
    )
