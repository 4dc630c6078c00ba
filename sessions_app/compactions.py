"""Compaction summaries and their pre-images: the repair worker's compaction source.

The three methods are upstream's session-manager surface for the compaction-summary repair
branch (``list_degraded_compactions``, ``get_compaction_preimage``,
``mark_compaction_repair_status``), over ``CompactionSummary`` and
``CompactedTranscriptEntry`` rows that an OpenSquilla import or mirror brought in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .keys import agent_prefix, normalize_agent_id
from .models import CompactedTranscriptEntry, CompactionSummary

# Upstream's degraded set: the pre-compaction flush was only archived, or a repair failed.
DEGRADED_FLUSH_STATUSES = ("degraded_forensic", "failed_retryable")


@dataclass(frozen=True)
class PreimageEntry:
    """A removed transcript entry under its original id, as upstream hands it to the flush."""

    id: int
    message_id: str
    role: str
    content: str | None
    tool_calls: Any
    tool_call_id: str | None
    reasoning_content: str | None
    token_count: int | None
    created_at: int

    @classmethod
    def from_row(cls, row: Any) -> PreimageEntry:
        """The entry a ``CompactedTranscriptEntry`` row keeps, under its original id."""
        return cls(
            id=row.original_entry_id,
            message_id=row.message_id,
            role=row.role,
            content=row.content,
            tool_calls=row.tool_calls,
            tool_call_id=row.tool_call_id,
            reasoning_content=row.reasoning_content,
            token_count=row.token_count,
            created_at=row.created_at,
        )


class CompactionSource:
    def list_degraded_compactions(
        self, *, agent_id: str | None = None, limit: int = 50
    ) -> list[CompactionSummary]:
        """Degraded summaries, oldest first; ``agent_id`` limits them to the agent's keys.

        The agent prefix is matched literally (upstream uses ``LIKE``, where the ``_`` of an
        agent id such as ``op_`` also matches ``ops``).
        """
        if limit <= 0:
            return []
        qs = CompactionSummary.objects.filter(flush_receipt_status__in=DEGRADED_FLUSH_STATUSES)
        if agent_id:
            qs = qs.filter(session_key__startswith=agent_prefix(normalize_agent_id(agent_id)))
        return list(qs.order_by("created_at", "id")[:limit])

    def get_compaction_preimage(self, summary: CompactionSummary) -> list[PreimageEntry]:
        if not summary.compaction_id:
            return []
        rows = CompactedTranscriptEntry.objects.filter(
            gateway_id=summary.gateway_id,
            session_id=summary.session_id,
            compaction_id=summary.compaction_id,
        ).order_by("created_at", "original_entry_id", "id")
        return [PreimageEntry.from_row(row) for row in rows]

    def mark_compaction_repair_status(self, summary: CompactionSummary, status: str) -> None:
        if summary.pk is None:
            return
        CompactionSummary.objects.filter(pk=summary.pk).update(flush_receipt_status=status)
