"""Transcript normalisation and segmenting for the flush (docs/UPSTREAM.md#flush-steps).

The output is what both the provider prompt and the raw archive see, so its rules
(which roles survive, the 50 000-character cut, the source prefix) decide the archive
bytes and therefore its hash.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .archive import dump_transcript_excerpt
from .types import Message

MAX_MESSAGE_CHARS = 50_000
TRUNCATION_SUFFIX = "\n...[truncated]"
DEFAULT_SEGMENT_MAX_CHARS = 8_000

SOURCE_ANCHOR_RE = re.compile(r"^[A-Za-z0-9._:+-]+$")
INLINE_SOURCE_ANCHOR_RE = re.compile(
    r"(?i)\[(?:dia_id|dialogue_id|message_id|turn_id|anchor)\s*[:=]\s*"
    r"(?P<anchor>[A-Za-z0-9._:+-]+)\]"
)
_EMBEDDED_DIALOGUE_LINE_RE = re.compile(r"^\s*[A-Za-z][^:\n]{0,80}:\s+\S")
_MONTH_DAY_FORMATS = ("%B %d, %Y", "%b %d, %Y", "%d %B, %Y", "%d %b, %Y", "%d %B %Y", "%d %b %Y")
_TRANSCRIPT_HEADER_RE = re.compile(
    r"(?im)^\s*(?:session[\w.-]*|conversation|chat|dialogue)\b.{0,80}?\bon\s+"
    r"(?P<date>\d{4}-\d{1,2}-\d{1,2}|[A-Za-z]{3,9}\s+\d{1,2},\s*\d{4}"
    r"|\d{1,2}\s+[A-Za-z]{3,9},?\s+\d{4})\b"
)


@dataclass(frozen=True)
class FlushSegment:
    messages: list[Message]
    first_message: int
    last_message: int
    truncated: bool = False
    truncation_policy: str = "full"


def _header_source_date(content: str) -> str | None:
    """A date from a pasted "Session 3 on 2024-05-01" style header, if any."""
    # Only the head of the message: later mentions of a dated session are not metadata.
    match = _TRANSCRIPT_HEADER_RE.search(content[:2_000]) if content else None
    if match is None:
        return None
    raw = match.group("date").strip()
    iso = re.fullmatch(r"(\d{4})-(\d{1,2})-(\d{1,2})", raw)
    if iso:
        month, day = int(iso.group(2)), int(iso.group(3))
        if 1 <= month <= 12 and 1 <= day <= 31:
            return f"{iso.group(1)}-{month:02d}-{day:02d}"
        return None
    for fmt in _MONTH_DAY_FORMATS:
        try:
            return datetime.strptime(raw, fmt).strftime("%Y-%m-%d")
        except ValueError:
            continue
    return None


def _date_from_value(value: Any) -> str | None:
    if isinstance(value, datetime):
        stamp = value if value.tzinfo else value.replace(tzinfo=UTC)
        return stamp.astimezone(UTC).strftime("%Y-%m-%d")
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
        # Epoch milliseconds are what the ledger and transcript store.
        if seconds > 10_000_000_000:
            seconds /= 1000
        try:
            return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%d")
        except (OSError, OverflowError, ValueError):
            return None
    text = str(value).strip()
    if not text:
        return None
    try:
        return (
            datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC).strftime("%Y-%m-%d")
        )
    except ValueError:
        found = re.search(r"\d{4}-\d{2}-\d{2}", text)
        return found.group(0) if found else None


def _entry_source_date(entry: Any, content: str) -> str | None:
    embedded = _header_source_date(content)
    if embedded:
        return embedded
    for attr in ("created_at", "timestamp", "created_at_ms", "time"):
        value = getattr(entry, attr, None)
        if value is None:
            continue
        resolved = _date_from_value(value)
        if resolved:
            return resolved
    return None


def _entry_anchor(entry: Any) -> str | None:
    for attr in ("message_id", "id", "dia_id", "turn_id"):
        value = getattr(entry, attr, None)
        if value is None:
            continue
        anchor = str(value).strip()
        if anchor and SOURCE_ANCHOR_RE.fullmatch(anchor):
            return anchor
    return None


def source_prefix(*, message_number: int, source_date: str | None, anchor: str | None) -> str:
    if not source_date and not anchor:
        return ""
    parts = ["opensquilla-message:"]
    if source_date:
        parts.append(f"date={source_date}")
    parts.append(f"message={message_number}")
    if anchor:
        parts.append(f"anchor={anchor}")
    return "[" + " ".join(parts) + "]"


def strip_attachments(content: str) -> str:
    """Replace a ``{"text", "attachments"}`` envelope by its text plus attachment names."""
    stripped = content.strip()
    if not (stripped.startswith("{") and stripped.endswith("}")):
        return content
    try:
        envelope = json.loads(stripped)
    except ValueError:
        return content
    if not isinstance(envelope, dict) or "text" not in envelope:
        return content
    text = str(envelope.get("text", ""))
    attachments = envelope.get("attachments") or []
    if not isinstance(attachments, list):
        return text
    labels = [
        f"[attachment: {item.get('name', 'attachment')} "
        f"({item.get('type', 'application/octet-stream')})]"
        for item in attachments
        if isinstance(item, dict)
    ]
    return text + ("\n" + "\n".join(labels) if labels else "")


def _split_pasted_dialogue(
    content: str, *, next_number: int, default_date: str | None
) -> tuple[list[Message], int]:
    """Split a pasted dialogue with ``[dia_id: ...]`` anchors into one message per line."""
    if "[dia_id" not in content.lower():
        return [], next_number
    current_date = default_date
    out: list[Message] = []
    number = next_number
    for raw_line in content.splitlines():
        line = raw_line.strip()
        if not line:
            continue
        header_date = _header_source_date(line)
        if header_date:
            current_date = header_date
            continue
        anchor = INLINE_SOURCE_ANCHOR_RE.search(line)
        if anchor is None or _EMBEDDED_DIALOGUE_LINE_RE.match(line) is None:
            continue
        number += 1
        prefix = source_prefix(
            message_number=number, source_date=current_date, anchor=anchor.group("anchor")
        )
        out.append(Message(role="user", content=f"{prefix}\n{line}" if prefix else line))
    # A single anchored line is ordinary prose, not a pasted dialogue.
    if len(out) < 2:
        return [], next_number
    return out, number


def normalize_transcript(transcript: list[Any]) -> list[Message]:
    """Keep user/assistant text messages, cleaned and source-prefixed for the flush."""
    out: list[Message] = []
    number = 0
    for entry in transcript:
        role = getattr(entry, "role", None)
        content = getattr(entry, "content", None)
        # System prompts and tool output are not the user's memory; tool calls have no text.
        if role not in ("user", "assistant") or not isinstance(content, str):
            continue
        text = strip_attachments(content) if role == "user" else content
        # A pasted log must not blow the provider budget; the marker keeps the cut visible.
        if len(text) > MAX_MESSAGE_CHARS:
            text = text[:MAX_MESSAGE_CHARS] + TRUNCATION_SUFFIX
        source_date = _entry_source_date(entry, text)
        if role == "user":
            expanded, number_after = _split_pasted_dialogue(
                text, next_number=number, default_date=source_date
            )
            if expanded:
                out.extend(expanded)
                number = number_after
                continue
        number += 1
        prefix = source_prefix(
            message_number=number, source_date=source_date, anchor=_entry_anchor(entry)
        )
        out.append(Message(role=role, content=f"{prefix}\n{text}" if prefix else text))
    return out


def message_flush_text(message: Message) -> str:
    return dump_transcript_excerpt([message], max_chars=None, per_message_max_chars=None).text


def build_segments(
    messages: list[Message], *, segment_max_chars: int, overlap_messages: int = 0
) -> list[FlushSegment]:
    """Pack messages into segments of at most ``segment_max_chars`` rendered characters.

    A single message larger than the budget becomes its own truncated segment. With
    ``overlap_messages`` the tail of one segment is repeated at the head of the next, as
    far as the budget allows, so facts that straddle a boundary keep their context.
    """
    if segment_max_chars <= 0:
        raise ValueError("segment_max_chars must be > 0")
    if overlap_messages < 0:
        raise ValueError("segment_overlap_messages must be >= 0")
    segments: list[FlushSegment] = []
    current: list[tuple[int, Message, int]] = []

    def size(items: list[tuple[int, Message, int]]) -> int:
        return sum(item[2] for item in items) + max(0, len(items) - 1)

    def emit() -> list[tuple[int, Message, int]]:
        nonlocal current
        emitted = current
        if emitted:
            segments.append(
                FlushSegment(
                    messages=[item[1] for item in emitted],
                    first_message=emitted[0][0],
                    last_message=emitted[-1][0],
                )
            )
        current = []
        return emitted

    # Indices stay 1-based within the window so receipts can map them back to the transcript.
    for index, message in enumerate(messages, start=1):
        chars = len(message_flush_text(message))
        if chars == 0:
            continue
        if chars > segment_max_chars:
            emit()
            segments.append(
                FlushSegment(
                    messages=[message],
                    first_message=index,
                    last_message=index,
                    truncated=True,
                    truncation_policy=f"single_message_max_chars={segment_max_chars}",
                )
            )
            continue
        if current and size(current) + 1 + chars > segment_max_chars:
            emitted = emit()
            if overlap_messages:
                current = emitted[-min(overlap_messages, len(emitted)) :]
                while current and size(current) + 1 + chars > segment_max_chars:
                    current.pop(0)
        current.append((index, message, chars))
    emit()
    return segments
