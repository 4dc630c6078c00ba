"""Which flush outcomes are safe, and which ledger row each one produces (DOMAIN.md 6.5).

These rules decide whether a transcript may be destroyed, so they are kept apart from the
service and written as plain predicates over a receipt (object or mapping).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..statuses import CHECKPOINT_FAILED, FLUSH_APPENDED, REPAIR_FAILED, REPAIR_PENDING
from .types import ARCHIVED_RESULT_STATUSES, NOOP_RESULT_STATUSES, FlushReceipt

FLUSH_RESERVED_PATH_PREFIXES = ("memory/.raw_fallbacks/", "memory/.checkpoints/")
FLUSH_RESERVED_PATHS = frozenset({"MEMORY.md", "AGENTS.md", "USER.md", "SOUL.md", "TOOLS.md"})


def _get(receipt: Any, name: str, default: Any) -> Any:
    if isinstance(receipt, Mapping):
        return receipt.get(name, default)
    return getattr(receipt, name, default)


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def flush_receipt_allows_destructive_compaction(receipt: Any) -> bool:
    """The strict-safety predicate: an LLM write that provably kept everything.

    Requires mode ``llm``, at least one indexed chunk, integrity ``ok``, output coverage
    ``ok``, no invalid or missing candidates, and obligations either absent or ``ok`` /
    ``backfilled`` with none missing. Raw archives never qualify: they are lossy.
    """
    if receipt is None or _get(receipt, "mode", None) != "llm":
        return False
    if _int(_get(receipt, "indexed_chunk_count", 0)) <= 0:
        return False
    if _get(receipt, "integrity_status", None) != "ok":
        return False
    if _get(receipt, "output_coverage_status", None) != "ok":
        return False
    if _int(_get(receipt, "invalid_candidate_count", 0)) > 0:
        return False
    if _get(receipt, "candidate_missing_ids", None):
        return False
    missing_obligations = _get(receipt, "obligation_missing_ids", None)
    # No obligations at all is fine: most transcripts have no dated, anchored user lines.
    if _int(_get(receipt, "obligation_count", 0)) <= 0 and not missing_obligations:
        return True
    if _get(receipt, "obligation_status", None) not in {"ok", "backfilled"}:
        return False
    return not missing_obligations


def flush_receipt_is_successful_flush(receipt: Any) -> bool:
    """Done without needing a retry: strictly safe, or an honest "nothing to remember".

    Weaker than destructive safety on purpose: a no-op must not be retried as a failure
    by callers that only ask "did the flush finish?".
    """
    if receipt is None:
        return False
    if flush_receipt_allows_destructive_compaction(receipt):
        return True
    return str(_get(receipt, "result_status", "") or "") in NOOP_RESULT_STATUSES


def ledger_row_fields(
    receipt: FlushReceipt, *, checkpoint_exists: bool | None
) -> dict[str, str | None] | None:
    """The ledger row for a finished flush, or None when the outcome writes no row."""
    status = receipt.result_status
    if status in ARCHIVED_RESULT_STATUSES:
        scope, row_status, reason = "repair", REPAIR_PENDING, status
    elif status == "archive_failed":
        # Without a checkpoint nothing durable covers the transcript: say so loudly.
        if checkpoint_exists is False:
            scope, row_status = "checkpoint", CHECKPOINT_FAILED
        else:
            scope, row_status = "repair", REPAIR_FAILED
        reason = "archive_failed"
    elif flush_receipt_allows_destructive_compaction(receipt):
        scope, row_status, reason = "flush", FLUSH_APPENDED, None
    else:
        # Skipped, no-op and not-strictly-safe LLM writes leave no row (DOMAIN.md 11).
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
