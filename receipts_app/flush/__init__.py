"""OpenSquilla's session flush, ported as a Django-independent package (docs/UPSTREAM.md#flush).

Import from here: the submodules are an implementation detail. Only
``receipts_app.flush.providers.select_flush_provider`` touches Django settings, and only
when it is called.
"""

from .archive import parse_raw_fallback_entries, write_raw_fallback_archive
from .correlation import ProviderRequestCorrelation
from .safety import (
    allows_destructive_compaction,
    flush_receipt_allows_destructive_compaction,
    flush_receipt_is_successful_flush,
)
from .service import SessionFlushService
from .status import FlushStatus, classify_flush_receipt
from .types import FlushReceipt, Message, ProviderCompletionError, ToolCall, ToolResult

__all__ = [
    "FlushReceipt",
    "FlushStatus",
    "Message",
    "ProviderCompletionError",
    "ProviderRequestCorrelation",
    "SessionFlushService",
    "ToolCall",
    "ToolResult",
    "allows_destructive_compaction",
    "classify_flush_receipt",
    "flush_receipt_allows_destructive_compaction",
    "flush_receipt_is_successful_flush",
    "parse_raw_fallback_entries",
    "write_raw_fallback_archive",
]
