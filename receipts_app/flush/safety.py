"""Which ledger row each flush outcome produces, and the save-path guard.

See docs/UPSTREAM.md#flush-outcomes-and-ledger-rows.

What an outcome *means* (strictly safe, archived and repairable, failed) is decided once,
by the classifier in ``status.py``; this module only maps that classification to a row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..statuses import CHECKPOINT_FAILED, FLUSH_APPENDED, REPAIR_FAILED, REPAIR_PENDING
from .status import (
    classify_flush_receipt,
    flush_receipt_allows_destructive_compaction,
    flush_receipt_is_successful_flush,
)
from .types import FlushReceipt

__all__ = [
    "FLUSH_RESERVED_PATHS",
    "FLUSH_RESERVED_PATH_PREFIXES",
    "allows_destructive_compaction",
    "flush_receipt_allows_destructive_compaction",
    "flush_receipt_is_successful_flush",
    "ledger_row_fields",
    "validate_flush_save_arguments",
]

FLUSH_RESERVED_PATH_PREFIXES = ("memory/.raw_fallbacks/", "memory/.checkpoints/")
FLUSH_RESERVED_PATHS = frozenset({"MEMORY.md", "AGENTS.md", "USER.md", "SOUL.md", "TOOLS.md"})


def allows_destructive_compaction(receipt: Any, *, required: bool = True) -> bool:
    """May the flushed transcript be compacted away? Upstream's answer, via the classifier.

    True for a strictly safe write and for an archived degraded outcome whose raw archive
    exists (``parse_failed_archived`` with its archive, say): the transcript survives in
    the archive and a repair row is queued. ``required=False`` means no flush was needed.
    """
    return classify_flush_receipt(receipt, required=required).allows_destructive_compaction


def ledger_row_fields(
    receipt: FlushReceipt, *, checkpoint_exists: bool | None
) -> dict[str, str | None] | None:
    """The ledger row for a finished flush, or None when the outcome writes no row."""
    classified = classify_flush_receipt(receipt)
    if classified.repair_status == "pending":
        scope, row_status, reason = "repair", REPAIR_PENDING, receipt.result_status
    elif classified.repair_status == "failed":
        # Without a checkpoint nothing durable covers the transcript: say so loudly.
        if checkpoint_exists is False:
            scope, row_status = "checkpoint", CHECKPOINT_FAILED
        else:
            scope, row_status = "repair", REPAIR_FAILED
        reason = "archive_failed"
    elif classified.safety_status == "safe":
        scope, row_status, reason = "flush", FLUSH_APPENDED, None
    else:
        # Skipped, no-op and not-strictly-safe LLM writes leave no row (docs/UPSTREAM.md#flush-outcomes-and-ledger-rows).
        return None
    return {
        "scope": scope,
        "status": row_status,
        "reason": reason,
        "target_path": receipt.flushed_paths[0] if receipt.flushed_paths else None,
        "session_id": receipt.session_id,
        "turn_id": receipt.turn_id,
        "source_path": receipt.source_path,
        "content_hash": receipt.content_hash,
    }


def validate_flush_save_arguments(arguments: Any, *, relative_path: str) -> str | None:
    """Return a denial reason unless the save appends to exactly the planned path."""
    denial = f"Flush may only append to {relative_path}."
    if not isinstance(arguments, Mapping):
        return denial
    path = arguments.get("path")
    # Exact match, not a prefix: the model must not choose its own file name.
    if (
        not isinstance(path, str)
        or path != relative_path
        or arguments.get("mode") != "append"
        or path.startswith(FLUSH_RESERVED_PATH_PREFIXES)
        or path in FLUSH_RESERVED_PATHS
    ):
        return denial
    return None
