"""Checkpoint ids and hashes, byte-compatible with OpenSquilla (docs/UPSTREAM.md#ids-and-hashes)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any


def _json(value: Any) -> str:
    """Python's default ``json.dumps`` formatting, which the reference hashes over."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def checkpoint_event_hash(value: Any) -> str:
    """sha256 hex of the stripped string form (None is ``""``): upstream's ``H()``."""
    text = "" if value is None else str(value)
    return hashlib.sha256(text.strip().encode("utf-8")).hexdigest()


def _field(entry: Any, name: str, default: Any = None) -> Any:
    if isinstance(entry, Mapping):
        return entry.get(name, default)
    return getattr(entry, name, default)


def _coverage_item(entry: Any) -> dict[str, Any]:
    return {
        "role": _field(entry, "role") or "",
        "content": _field(entry, "content") or "",
        "tool_call_id": _field(entry, "tool_call_id"),
        "tool_calls": _field(entry, "tool_calls"),
        "reasoning_content": _field(entry, "reasoning_content"),
    }


def entry_id(entry: Any) -> Any:
    """The id upstream computes from: a mapping's ``id``; for a stored entry, the id its
    gateway knows it by (``TranscriptEntry.own_id``: a gateway's own id, not ours)."""
    if isinstance(entry, Mapping):
        return entry.get("id")
    own = getattr(entry, "own_id", None)
    return own if own is not None else getattr(entry, "id", None)


def checkpoint_turn_id(entries: Sequence[Any]) -> str:
    ids = [entry_id(e) for e in entries]
    int_ids = [i for i in ids if isinstance(i, int) and not isinstance(i, bool)]
    if int_ids:
        return f"through-{max(int_ids)}"
    return "turn-" + checkpoint_event_hash(_json([_coverage_item(e) for e in entries]))[:16]


def checkpoint_coverage_hash(entries: Sequence[Any]) -> str:
    items = [{**_coverage_item(e), "id": entry_id(e)} for e in entries]
    return checkpoint_event_hash(_json(items))
