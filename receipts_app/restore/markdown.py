"""A checkpoint as Markdown: one section per entry, its tool calls under it, streamed line by
line. Every text from the file goes in a fenced block whose fence is longer than any run of
backticks inside it, so no content can end the block or become Markdown of its own."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime

from ..models import MemoryDurableReceipt
from .readback import TOOL_CALL, parse_event

_BACKTICKS = re.compile(r"`+")


def _fenced(text: str, info: str = "") -> str:
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    body = text if text.endswith("\n") else text + "\n"
    return f"{fence}{info}\n{body}{fence}\n\n"


def _when(ms: int | None) -> str:
    if ms is None:
        return "no time"
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return str(ms)


def _inline(text: str | None) -> str:
    """A value for a heading or list item: one line, backticks kept out of code spans."""
    return " ".join(str(text or "").split()).replace("`", "'")


def markdown_lines(receipt: MemoryDurableReceipt, lines: Iterable[bytes]) -> Iterator[str]:
    yield f"# Checkpoint {_inline(receipt.receipt_id)}\n\n"
    yield f"- gateway: `{_inline(receipt.gateway_id)}`\n"
    yield f"- session: `{_inline(receipt.session_key)}` (generation `{_inline(receipt.session_id)}`)\n"
    yield f"- turn: `{_inline(receipt.turn_id)}` · coverage `{_inline(receipt.coverage_turn_id)}`, {receipt.coverage_entry_count or 0} entries\n"
    yield f"- file: `{_inline(receipt.source_path)}` · sha256 `{_inline(receipt.content_hash)}`\n\n"
    position = 0
    for line_no, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text:
            continue
        try:
            event = parse_event(line_no, json.loads(text.decode("utf-8")), content_limit=None)
        except (ValueError, UnicodeDecodeError):
            yield f"> Line {line_no} does not parse as a checkpoint event; it is in the JSONL download.\n\n"
            continue
        damaged = "" if event.intact else " · **damaged: content does not match its content_hash**"
        if event.role == TOOL_CALL and position:
            name = _inline(event.tool_name) or "tool"
            call = f" `{_inline(event.tool_call_id)}`" if event.tool_call_id else ""
            yield f"### Tool call: {name}{call}{damaged}\n\n"
        else:
            position += 1
            call = f" · for `{_inline(event.tool_call_id)}`" if event.tool_call_id else ""
            yield f"## {position}. {_inline(event.role)} · {_when(event.timestamp_ms)}{call}{damaged}\n\n"
        yield _fenced(event.content, "json" if event.content_type == "json" else "text")
