"""Restore: one checkpoint receipt read back for the console, the API and the downloads.

``restore_checkpoint`` reads the file once (a window of entries with their text, every entry's
fingerprint), compares it with the generation's live transcript, and adds the loss report when
the file does not read back whole. The errors are typed, so every edge maps them the same way
(docs/API.md): 404 unknown receipt, 422 not a checkpoint receipt, 409 file missing, unreadable
or on another gateway's host.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from opensquilla_site.exceptions import ConflictError, ValidationFailed

from ..models import MemoryDurableReceipt
from ..selectors import get_receipt
from . import files
from .generation import HeldEntry, live_entries, live_generation
from .loss import WHOLE, LossReport, file_state_of, loss_for_receipt, read_file
from .markdown import markdown_lines
from .readback import Readback

PAGE_SIZE = 100
PAGE_SIZE_MAX = 500
# One entry's text is shown up to this many characters; the download has all of it.
CONTENT_LIMIT = 100_000
# The transcript-only entries listed (all are counted).
TRANSCRIPT_ONLY_CAP = 200
DOWNLOAD_CHUNK = 64 * 1024


class NotACheckpoint(ValidationFailed):
    code = "not_a_checkpoint"


class _FileProblem(ConflictError):
    def __init__(self, message: str, *, loss: LossReport | None = None) -> None:
        super().__init__(message, extra={"loss": loss.as_dict()} if loss is not None else None)
        self.loss = loss


class CheckpointMissing(_FileProblem):
    code = "checkpoint_missing"


class CheckpointUnreadable(_FileProblem):
    code = "checkpoint_unreadable"


class CheckpointElsewhere(_FileProblem):
    code = "checkpoint_elsewhere"


@dataclass(frozen=True)
class TranscriptOnly:
    ref: str
    role: str
    created_at: int
    preview: str


@dataclass
class Comparison:
    """The checkpoint's entries against the live transcript of the generation it saved."""

    same: int
    checkpoint_only: int
    transcript_only: int
    matched: dict[int, str]  # checkpoint position -> the transcript entry it matched
    transcript_only_entries: list[TranscriptOnly] = field(default_factory=list)
    transcript_entries: int = 0
    live_generation: bool = True
    session_exists: bool = True


@dataclass
class RestoreView:
    receipt: MemoryDurableReceipt
    readback: Readback
    comparison: Comparison
    file_state: str
    file_message: str
    loss: LossReport | None

    @property
    def shown_from(self) -> int:
        return self.readback.offset + 1 if self.readback.entries else 0

    @property
    def shown_to(self) -> int:
        return self.readback.offset + len(self.readback.entries)

    @property
    def next_offset(self) -> int | None:
        end = self.shown_to
        return end if end < self.readback.entry_count else None

    @property
    def previous_offset(self) -> int | None:
        if self.readback.offset <= 0:
            return None
        return max(0, self.readback.offset - self.readback.limit)


def compare(receipt: MemoryDurableReceipt, readback: Readback, live: list[HeldEntry]) -> Comparison:
    """Match every checkpoint entry to a live transcript entry by fingerprint, in order, each
    transcript entry at most once (``matching``); what is left on either side is "only"."""
    waiting: dict[str, list[HeldEntry]] = {}
    for held in reversed(live):
        waiting.setdefault(held.fingerprint, []).append(held)
    matched: dict[int, str] = {}
    for key in readback.keys:
        queue = waiting.get(key.fingerprint) if key.intact else None
        if queue:
            matched[key.position] = queue.pop().ref
    used = set(matched.values())
    left = [held for held in live if held.ref not in used]
    current = live_generation(receipt)
    return Comparison(
        same=len(matched),
        checkpoint_only=readback.entry_count - len(matched),
        transcript_only=len(left),
        matched=matched,
        transcript_only_entries=[
            TranscriptOnly(h.ref, h.role, h.created_at, h.preview)
            for h in left[:TRANSCRIPT_ONLY_CAP]
        ],
        transcript_entries=len(live),
        live_generation=current == receipt.session_id,
        session_exists=current is not None,
    )


def _checkpoint_receipt(receipt_or_id: MemoryDurableReceipt | str) -> MemoryDurableReceipt:
    receipt = (
        receipt_or_id
        if isinstance(receipt_or_id, MemoryDurableReceipt)
        else get_receipt(receipt_or_id)
    )
    if receipt.scope != "checkpoint":
        raise NotACheckpoint(
            f"receipt {receipt.receipt_id} is a {receipt.scope} receipt, not a checkpoint"
        )
    return receipt


def _readable(receipt: MemoryDurableReceipt) -> files.Located:
    """The located file, or the typed error (with the loss report where one can be made)."""
    located = files.locate_checkpoint(receipt)
    if located.state == files.NO_FILE:
        raise NotACheckpoint(f"receipt {receipt.receipt_id} names no checkpoint file")
    if located.state == files.ELSEWHERE:
        raise CheckpointElsewhere(located.message, loss=loss_for_receipt(receipt))
    if located.state in (files.MISSING, files.OUTSIDE):
        raise CheckpointMissing(
            f"{located.message} ({located.stored_path})", loss=loss_for_receipt(receipt)
        )
    return located


def restore_checkpoint(
    receipt_or_id: MemoryDurableReceipt | str, *, offset: int = 0, limit: int = PAGE_SIZE
) -> RestoreView:
    """The checkpoint read back: entries ``offset`` to ``offset + limit`` with their text, the
    comparison over all of them, and the loss report when the file is not whole.

    Raises ``KeyError`` (unknown id), ``NotACheckpoint``, ``CheckpointMissing``,
    ``CheckpointUnreadable``, ``CheckpointElsewhere``.
    """
    receipt = _checkpoint_receipt(receipt_or_id)
    located = _readable(receipt)
    limit = max(1, min(limit, PAGE_SIZE_MAX))
    try:
        readback = read_file(
            located, offset=max(0, offset), limit=limit, content_limit=CONTENT_LIMIT
        )
    except OSError as exc:
        raise CheckpointUnreadable(
            f"The checkpoint file could not be read: {exc.strerror or exc}",
            loss=loss_for_receipt(receipt),
        ) from exc
    state, message = file_state_of(receipt, located, readback)
    if not readback.keys:
        raise CheckpointUnreadable(message, loss=loss_for_receipt(receipt, readback=readback))
    live = live_entries(receipt)
    loss = None if state == WHOLE else loss_for_receipt(receipt, readback=readback)
    return RestoreView(
        receipt=receipt,
        readback=readback,
        comparison=compare(receipt, readback, live),
        file_state=state,
        file_message=message,
        loss=loss,
    )


def checkpoint_jsonl_stream(
    receipt_or_id: MemoryDurableReceipt | str,
) -> tuple[str, Iterator[bytes]]:
    """The file exactly as stored, in chunks: ``(file name, chunks)``. Raises as
    :func:`restore_checkpoint` does, before the first byte is sent."""
    receipt = _checkpoint_receipt(receipt_or_id)
    path, handle = _opened(receipt)

    def chunks() -> Iterator[bytes]:
        with handle:
            while chunk := handle.read(DOWNLOAD_CHUNK):
                yield chunk

    return path.name, chunks()


def _opened(receipt: MemoryDurableReceipt) -> tuple[Path, BinaryIO]:
    """The receipt's readable file and a handle open for reading it (raises as
    :func:`restore_checkpoint` does)."""
    located = _readable(receipt)
    assert located.path is not None
    try:
        return located.path, located.path.open("rb")
    except OSError as exc:
        raise CheckpointUnreadable(
            f"The checkpoint file could not be read: {exc.strerror or exc}"
        ) from exc


def checkpoint_markdown_stream(
    receipt_or_id: MemoryDurableReceipt | str,
) -> tuple[str, Iterator[bytes]]:
    """The conversation as Markdown, rendered while the file streams: ``(file name, chunks)``."""
    receipt = _checkpoint_receipt(receipt_or_id)
    path, handle = _opened(receipt)

    def chunks() -> Iterator[bytes]:
        with handle:
            for text in markdown_lines(receipt, handle):
                yield text.encode("utf-8")

    return path.stem + ".md", chunks()
