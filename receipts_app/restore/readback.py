"""A checkpoint JSONL file read back as the conversation it saved. No Django, no database.

The file holds one event per transcript entry, each followed by one ``tool_call`` event per
tool call the entry made (docs/UPSTREAM.md#checkpoint-events). Reading back groups them again:
an event whose role is not ``tool_call`` starts an entry, the ``tool_call`` events after it are
that entry's calls. Every event carries ``content_hash`` = H(content); an event whose content no
longer hashes to it is marked damaged, so a flipped byte is located to the entry it hit.

The file is read as a stream, once: its SHA-256 (the receipt's ``content_hash``) and every
entry's fingerprint are kept, but the text of only the entries in the requested window, each
cut at ``content_limit`` characters, so a page over a very large file stays bounded in memory.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..checkpoint.hashing import checkpoint_event_hash
from .matching import fingerprint_of

TOOL_CALL = "tool_call"


@dataclass(frozen=True)
class Event:
    """One line of the file, as far as reading it back needs."""

    line_no: int
    sequence: int | None
    event_id: str
    role: str
    content: str
    content_type: str
    tool_name: str | None
    tool_call_id: str | None
    timestamp_ms: int | None
    token_estimate: int
    intact: bool
    truncated: bool = False
    content_hash: str = ""  # H(content) of the whole content, as read

    def fingerprint_part(self) -> list[Any]:
        """In the order of ``matching.FINGERPRINT_FIELDS``, then the content hash."""
        return [self.role, self.tool_call_id, self.tool_name, self.timestamp_ms, self.content_hash]


@dataclass(frozen=True)
class BadLine:
    line_no: int
    error: str


@dataclass
class Entry:
    """One transcript entry of the checkpoint: its message event and its tool calls."""

    position: int
    message: Event
    tool_calls: list[Event] = field(default_factory=list)
    fingerprint: str = ""

    @property
    def intact(self) -> bool:
        return self.message.intact and all(call.intact for call in self.tool_calls)


@dataclass(frozen=True)
class EntryKey:
    """What the comparison and the loss need of every entry, including those not shown."""

    position: int
    fingerprint: str
    intact: bool
    role: str
    timestamp_ms: int | None
    preview: str


@dataclass
class Readback:
    entries: list[Entry]
    keys: list[EntryKey]
    bad_lines: list[BadLine]
    event_count: int
    size: int
    sha256: str
    complete: bool
    offset: int
    limit: int

    @property
    def entry_count(self) -> int:
        return len(self.keys)

    @property
    def damaged_count(self) -> int:
        return sum(1 for key in self.keys if not key.intact) + len(self.bad_lines)


PREVIEW_CHARS = 160


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return None


def parse_event(line_no: int, record: Any, *, content_limit: int | None) -> Event:
    """An event from one parsed JSON line; raises ValueError when it is not an event object."""
    if not isinstance(record, dict):
        raise ValueError("the line is not a JSON object")
    content = record.get("content")
    if not isinstance(content, str):
        raise ValueError("the event has no text content")
    role = record.get("role")
    if not isinstance(role, str) or not role:
        raise ValueError("the event has no role")
    content_hash = checkpoint_event_hash(content)
    intact = record.get("content_hash") == content_hash
    truncated = content_limit is not None and len(content) > content_limit
    tool_name = record.get("tool_name")
    tool_call_id = record.get("tool_call_id")
    return Event(
        line_no=line_no,
        sequence=_as_int(record.get("sequence")),
        event_id=str(record.get("event_id") or ""),
        role=role,
        content=content[:content_limit] if truncated else content,
        content_type=str(record.get("content_type") or "text"),
        tool_name=tool_name if isinstance(tool_name, str) else None,
        tool_call_id=tool_call_id if isinstance(tool_call_id, str) else None,
        timestamp_ms=_as_int(record.get("timestamp_ms")),
        token_estimate=_as_int(record.get("token_estimate")) or 0,
        intact=intact,
        truncated=truncated,
        content_hash=content_hash,
    )


def _preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"


class _Builder:
    """Groups events into entries while the file streams past."""

    def __init__(self, offset: int, limit: int | None, content_limit: int | None) -> None:
        self.offset = offset
        self.limit = limit
        self.content_limit = content_limit
        self.entries: list[Entry] = []
        self.keys: list[EntryKey] = []
        self._events: list[Event] = []  # the open entry's events
        self._shown: Entry | None = None

    def _in_window(self, position: int) -> bool:
        index = position - 1
        if index < self.offset:
            return False
        return self.limit is None or index < self.offset + self.limit

    def add(self, event: Event) -> None:
        if event.role != TOOL_CALL or not self._events:
            self.close()
            position = len(self.keys) + 1
            self._shown = (
                Entry(position=position, message=event) if self._in_window(position) else None
            )
        elif self._shown is not None:
            self._shown.tool_calls.append(event)
        self._events.append(event)

    def close(self) -> None:
        if not self._events:
            return
        events = self._events
        fingerprint = fingerprint_of([event.fingerprint_part() for event in events])
        first = events[0]
        self.keys.append(
            EntryKey(
                position=len(self.keys) + 1,
                fingerprint=fingerprint,
                intact=all(event.intact for event in events),
                role=first.role,
                timestamp_ms=first.timestamp_ms,
                preview=_preview(first.content),
            )
        )
        if self._shown is not None:
            self._shown.fingerprint = fingerprint
            self.entries.append(self._shown)
        self._events = []
        self._shown = None


def read_checkpoint(
    chunks: Iterable[bytes],
    *,
    offset: int = 0,
    limit: int | None = None,
    content_limit: int | None = None,
    max_bytes: int | None = None,
) -> Readback:
    """Read a checkpoint's lines (``chunks`` are the file's lines, as a binary file iterates).

    Entries ``offset`` to ``offset + limit`` keep their text (``limit`` None: all of them);
    every entry keeps its fingerprint. Reading stops after ``max_bytes`` (``complete`` False).
    """
    builder = _Builder(max(0, offset), limit, content_limit)
    bad: list[BadLine] = []
    digest = hashlib.sha256()
    size = 0
    event_count = 0
    complete = True
    for line_no, raw in enumerate(chunks, start=1):
        if max_bytes is not None and size + len(raw) > max_bytes:
            complete = False
            break
        digest.update(raw)
        size += len(raw)
        text = raw.strip()
        if not text:
            continue
        try:
            record = json.loads(text.decode("utf-8"))
            event = parse_event(line_no, record, content_limit=content_limit)
        except (ValueError, UnicodeDecodeError) as exc:
            bad.append(BadLine(line_no, _bad_line_reason(exc)))
            continue
        event_count += 1
        builder.add(event)
    builder.close()
    return Readback(
        entries=builder.entries,
        keys=builder.keys,
        bad_lines=bad,
        event_count=event_count,
        size=size,
        sha256=digest.hexdigest(),
        complete=complete,
        offset=max(0, offset),
        limit=limit if limit is not None else len(builder.keys),
    )


def _bad_line_reason(exc: Exception) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8"
    if isinstance(exc, json.JSONDecodeError):
        return f"not JSON ({exc.msg})"
    return str(exc)
