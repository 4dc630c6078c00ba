"""What a flush receipt means: upstream's ``classify_flush_receipt`` (0.3.0 ``flush_status``).

Two different questions are answered here, and upstream keeps them apart too:

- **Strict safety** (:func:`flush_receipt_allows_destructive_compaction`): an LLM write that
  provably kept everything. Only such a flush writes ``flush_appended`` and only such a
  repair is ``repair_done``.
- **May the transcript be compacted destructively?** (``FlushStatus.allows_destructive_compaction``):
  yes for a strictly safe write, and also for an archived degraded outcome
  (``ok_archive_only``, ``*_failed_archived``) whose raw archive exists (a content hash and
  a ``memory/.raw_fallbacks/`` path): the transcript survives in the archive and a repair
  row is queued. That is ``safety_status == "degraded_archive"``.

Every function takes a receipt object or a mapping, never mutates it, and never raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from .types import ARCHIVED_RESULT_STATUSES, NOOP_RESULT_STATUSES

RAW_ARCHIVE_PREFIX = "memory/.raw_fallbacks/"
ARCHIVE_ONLY_RESULT_STATUSES = frozenset({"ok_archive_only"})
ARCHIVED_DEGRADED_RESULT_STATUSES = ARCHIVED_RESULT_STATUSES - ARCHIVE_ONLY_RESULT_STATUSES
FAILED_RESULT_STATUSES = frozenset({"archive_failed"})

SafetyStatus = Literal["safe", "degraded_archive", "unsafe", "not_required"]
SemanticStatus = Literal["healthy", "pending", "degraded", "failed", "not_required"]
RepairStatus = Literal["none", "pending", "failed"]


def _get(receipt: Any, name: str, default: Any) -> Any:
    if isinstance(receipt, Mapping):
        return receipt.get(name, default)
    return getattr(receipt, name, default)


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _result_status(receipt: Any) -> str:
    return str(_get(receipt, "result_status", "") or "")


def _paths(receipt: Any) -> list[str]:
    paths = _get(receipt, "flushed_paths", None) or []
    if isinstance(paths, str):
        return [paths]
    return [str(p) for p in paths]


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
    return _result_status(receipt) in NOOP_RESULT_STATUSES


def has_archive_evidence(receipt: Any) -> bool:
    """A content hash and at least one path inside the raw-fallback archive directory."""
    return bool(_get(receipt, "content_hash", None)) and any(
        path.startswith(RAW_ARCHIVE_PREFIX) for path in _paths(receipt)
    )


def flush_receipt_status(receipt: Any) -> str:
    """``safe``, ``noop_no_memory``, ``archive_only``, ``degraded_forensic`` or ``unsafe``."""
    if receipt is None:
        return "not_requested"
    if flush_receipt_allows_destructive_compaction(receipt):
        return "safe"
    result_status = _result_status(receipt)
    if result_status in NOOP_RESULT_STATUSES:
        return "noop_no_memory"
    if result_status in ARCHIVE_ONLY_RESULT_STATUSES:
        return "archive_only"
    if result_status in ARCHIVED_DEGRADED_RESULT_STATUSES:
        return "degraded_forensic"
    return "unsafe"


def _semantic_status(receipt: Any) -> SemanticStatus:
    if receipt is None:
        return "pending"
    if flush_receipt_allows_destructive_compaction(receipt):
        return "healthy"
    result_status = _result_status(receipt)
    if result_status in NOOP_RESULT_STATUSES:
        return "healthy"
    if result_status in ARCHIVE_ONLY_RESULT_STATUSES:
        return "degraded"
    if result_status in ARCHIVED_DEGRADED_RESULT_STATUSES | FAILED_RESULT_STATUSES:
        return "failed"
    return "degraded"


def _safety(receipt: Any, *, required: bool) -> tuple[SafetyStatus, bool]:
    """``(safety_status, allows_destructive_compaction)``."""
    if not required:
        return "not_required", True
    if flush_receipt_allows_destructive_compaction(receipt):
        return "safe", True
    if _result_status(receipt) in ARCHIVED_RESULT_STATUSES and has_archive_evidence(receipt):
        return "degraded_archive", True
    return "unsafe", False


@dataclass(frozen=True)
class FlushStatus:
    """One flush receipt, classified for retry, audit and compaction decisions."""

    receipt_status: str
    safety_status: str
    semantic_status: str
    repair_status: RepairStatus
    allows_destructive_compaction: bool
    successful_flush: bool
    has_raw_archive: bool
    result_status: str
    raw_reason: str | None = None
    target_path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _optional_str(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def classify_flush_receipt(receipt: Any, *, required: bool = True) -> FlushStatus:
    """Classify a flush receipt with upstream's meaning; ``required=False``: no flush needed."""
    result_status = _result_status(receipt)
    paths = _paths(receipt)
    target_path = _optional_str(paths[0] if paths else None) or _optional_str(
        _get(receipt, "target_path", None)
    )
    repair_status: RepairStatus = "none"
    if result_status in FAILED_RESULT_STATUSES:
        repair_status = "failed"
    elif result_status.endswith("_archived") or result_status in ARCHIVE_ONLY_RESULT_STATUSES:
        repair_status = "pending"
    safety_status, allows = _safety(receipt, required=required)
    return FlushStatus(
        receipt_status=flush_receipt_status(receipt),
        safety_status=safety_status,
        semantic_status=_semantic_status(receipt) if required else "not_required",
        repair_status=repair_status,
        allows_destructive_compaction=allows,
        successful_flush=flush_receipt_is_successful_flush(receipt),
        has_raw_archive=bool(target_path and target_path.startswith(RAW_ARCHIVE_PREFIX)),
        result_status=result_status,
        raw_reason=_optional_str(_get(receipt, "raw_reason", None)),
        target_path=target_path,
    )
