"""The transcripts a checkpoint's entries may still be in: its session generation's live
transcript, and the pre-images of its compactions that an OpenSquilla import or mirror keeps.

Both are read in the receipt's own gateway (``using_gateway``), whatever gateway the page or
request is scoped to: a receipt names its gateway, and its session key and generation mean
something only there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sessions_app.compactions import PreimageEntry
from sessions_app.gateways import using_gateway
from sessions_app.models import CompactedTranscriptEntry, Session, TranscriptEntry

from ..models import MemoryDurableReceipt
from .matching import transcript_entry_id, transcript_entry_ref, transcript_fingerprint
from .readback import PREVIEW_CHARS


@dataclass(frozen=True)
class HeldEntry:
    """A transcript entry of the generation, with what matching and display need."""

    entry: Any  # TranscriptEntry, or a PreimageEntry under its original id
    ref: str
    fingerprint: str
    live: bool

    @property
    def entry_id(self) -> int:
        return transcript_entry_id(self.entry)

    def coverage_item(self) -> dict[str, Any]:
        """The entry as the coverage hash reads it, under its gateway's own id."""
        return {
            "id": self.entry_id,
            "role": self.entry.role,
            "content": self.entry.content,
            "tool_call_id": self.entry.tool_call_id,
            "tool_calls": self.entry.tool_calls,
            "reasoning_content": self.entry.reasoning_content,
        }

    @property
    def role(self) -> str:
        return str(self.entry.role or "")

    @property
    def created_at(self) -> int:
        return int(self.entry.created_at or 0)

    @property
    def preview(self) -> str:
        text = " ".join(str(self.entry.content or self.entry.reasoning_content or "").split())
        return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def live_entries(receipt: MemoryDurableReceipt) -> list[HeldEntry]:
    """The generation's live transcript, oldest first (the order a checkpoint saves)."""
    with using_gateway(receipt.gateway_id):
        rows = TranscriptEntry.objects.here().filter(session_id=receipt.session_id or "")
        return [
            HeldEntry(row, transcript_entry_ref(row), transcript_fingerprint(row), live=True)
            for row in rows.order_by("created_at", "id").iterator(chunk_size=2000)
        ]


def compacted_entries(receipt: MemoryDurableReceipt) -> list[HeldEntry]:
    """The generation's compaction pre-images, each under the id it had in the transcript."""
    with using_gateway(receipt.gateway_id):
        rows = CompactedTranscriptEntry.objects.here().filter(session_id=receipt.session_id or "")
        held = []
        for row in rows.order_by("created_at", "original_entry_id", "id").iterator(chunk_size=2000):
            entry = PreimageEntry.from_row(row)
            held.append(
                HeldEntry(entry, transcript_entry_ref(entry), transcript_fingerprint(entry), False)
            )
        return held


def live_generation(receipt: MemoryDurableReceipt) -> str | None:
    """The session's current generation (``session_id``), None when the session is gone."""
    with using_gateway(receipt.gateway_id):
        return (
            Session.objects.here()
            .filter(session_key=receipt.session_key)
            .values_list("session_id", flat=True)
            .first()
        )
