"""Checkpoint events: one per transcript entry plus one per tool call (docs/UPSTREAM.md#checkpoint-events)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .hashing import _field, _json, checkpoint_event_hash, checkpoint_turn_id

DEFAULT_SOURCE = "session_manager"
_ROLE_MAP = {"tool": "tool_result", "user": "user", "assistant": "assistant"}


def _plain(value: Any) -> Any:
    """Provider models (pydantic) as plain data, however deep in lists, tuples and dicts.

    A message's content may be a list of provider content blocks; each block must be written
    as its JSON object, as upstream does, not as the model's ``repr`` that ``default=str``
    would give, or the checkpoint bytes and hashes differ (docs/UPSTREAM.md).
    """
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    return value


def _serialise_content(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return _json(_plain(value))


def _event_content(entry: Any) -> str:
    content = _field(entry, "content")
    reasoning = _field(entry, "reasoning_content")
    if content is not None and reasoning:
        return _serialise_content({"content": content, "reasoning_content": reasoning})
    if content is not None:
        return _serialise_content(content)
    return _serialise_content(reasoning)


def _tool_call_content(call: Mapping[str, Any]) -> str:
    function = call.get("function")
    if isinstance(function, Mapping) and function.get("arguments") is not None:
        # str(), not JSON: upstream writes dict arguments in Python's repr, and the bytes
        # of the checkpoint must match.
        return str(function.get("arguments") or "")
    return _json(call)


def _content_type(content: str) -> str:
    stripped = content.strip()
    if stripped[:1] in ("{", "["):
        try:
            json.loads(stripped)
        except ValueError:
            return "text"
        return "json"
    return "text"


def _event_id(session_key: str, turn_id: str, sequence: int, role: str, content: str) -> str:
    seed = f"{session_key}:{turn_id}:{sequence}:{role}:{checkpoint_event_hash(content)}"
    return "checkpoint-" + checkpoint_event_hash(seed)[:16]


def _base_event(
    *, session_key: str, session_id: str, turn_id: str, sequence: int, source: str
) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "session_key": session_key,
        "session_id": session_id,
        "turn_id": turn_id,
        "sequence": sequence,
        "summary": None,
        "status": "ok",
        "source": source,
        "attachments": [],
    }


def build_checkpoint_events(
    entries: Sequence[Any],
    *,
    session_key: str,
    session_id: str,
    turn_id: str | None = None,
    source: str = DEFAULT_SOURCE,
    clock_ms: int | None = None,
) -> list[dict[str, Any]]:
    """One event per entry, plus one ``tool_call`` event per tool call dict after it.

    ``clock_ms`` stands in for "now" on entries without ``created_at`` (tests pin it).
    """
    if not entries:
        raise ValueError("checkpoint entries cannot be empty")
    resolved_turn = turn_id or checkpoint_turn_id(entries)
    built_at = clock_ms if clock_ms is not None else int(time.time() * 1000)
    events: list[dict[str, Any]] = []
    sequence = 0
    for entry in entries:
        sequence += 1
        raw_role = str(_field(entry, "role") or "")
        content = _event_content(entry)
        # As upstream: a falsy created_at (None or 0) is "now".
        timestamp = int(_field(entry, "created_at") or built_at)
        event = _base_event(
            session_key=session_key,
            session_id=session_id,
            turn_id=resolved_turn,
            sequence=sequence,
            source=source,
        )
        event.update(
            event_id=_event_id(session_key, resolved_turn, sequence, raw_role, content),
            timestamp_ms=timestamp,
            role=_ROLE_MAP.get(raw_role, "system_notice"),
            content=content,
            content_type=_content_type(content),
            tool_name=None,
            tool_call_id=_field(entry, "tool_call_id"),
            token_estimate=int(_field(entry, "token_count") or 0),
        )
        events.append(event)
        tool_calls = _field(entry, "tool_calls") or []
        # Only a list is read as tool calls, as upstream.
        for call in tool_calls if isinstance(tool_calls, list) else []:
            if not isinstance(call, Mapping):
                continue
            sequence += 1
            function = call.get("function")
            call_content = _tool_call_content(call)
            tool_name = function.get("name") if isinstance(function, Mapping) else call.get("name")
            call_id = call.get("id")
            tool_event = _base_event(
                session_key=session_key,
                session_id=session_id,
                turn_id=resolved_turn,
                sequence=sequence,
                source=source,
            )
            tool_event.update(
                event_id=_event_id(session_key, resolved_turn, sequence, "tool_call", call_content),
                timestamp_ms=timestamp,
                role="tool_call",
                content=call_content,
                content_type=_content_type(call_content),
                tool_name=tool_name,
                tool_call_id=str(call_id) if call_id else None,
                token_estimate=0,
            )
            events.append(tool_event)
    return events


def serialise_checkpoint_events(events: Sequence[Mapping[str, Any]]) -> list[str]:
    """One JSON line per event, ``content_hash`` filled in (no trailing newlines)."""
    lines = []
    for event in events:
        record = dict(event)
        record["content_hash"] = checkpoint_event_hash(record.get("content"))
        lines.append(json.dumps(record, ensure_ascii=False, sort_keys=True))
    return lines
