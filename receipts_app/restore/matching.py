"""When a checkpoint's entry and a transcript entry are the same entry (docs/CONSOLE.md#restore).

A checkpoint event carries no transcript entry id: its ``event_id`` is a hash of the session
key, the checkpoint's turn id, the event's position and its content (docs/UPSTREAM.md), so the
same entry has another ``event_id`` in every checkpoint. What the events do carry is
the entry's role, its content (with ``content_hash``), ``tool_call_id``, ``timestamp_ms`` (the
entry's ``created_at``) and, for each tool call, its name, id and arguments. An entry's
**fingerprint** is the hash of exactly those fields over the entry's event and its tool-call
events. A transcript entry's fingerprint is taken from the events the checkpoint writer would
build for it (``build_checkpoint_events``), so the two agree byte for byte.

Entries are matched by fingerprint, in order, each transcript entry at most once: two equal
messages at the same millisecond are two matches, not one. A transcript entry is then named by
:func:`transcript_entry_ref` (the only place that says which id names an entry).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..checkpoint.events import build_checkpoint_events
from ..checkpoint.hashing import checkpoint_event_hash

# What of each event identifies the entry. ``event_id``, ``sequence``, ``turn_id``, ``source``
# and ``token_estimate`` are left out: they depend on the checkpoint, not on the entry.
FINGERPRINT_FIELDS = ("role", "tool_call_id", "tool_name", "timestamp_ms")


def fingerprint_of(parts: Sequence[Sequence[Any]]) -> str:
    """The fingerprint of one entry from each event's ``FINGERPRINT_FIELDS`` values followed by
    its content hash (``readback.Event.fingerprint_part`` gives them for a line read back)."""
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode("utf-8")).hexdigest()


def events_fingerprint(events: Sequence[Mapping[str, Any]]) -> str:
    """The fingerprint of one entry from its events as dicts (built ones, or parsed lines)."""
    return fingerprint_of(
        [
            [
                *(event.get(name) for name in FINGERPRINT_FIELDS),
                checkpoint_event_hash(event.get("content")),
            ]
            for event in events
        ]
    )


def transcript_fingerprint(entry: Any) -> str:
    """The fingerprint of a transcript entry (a ``TranscriptEntry``, a compacted pre-image row,
    or anything with the entry's fields)."""
    created = getattr(entry, "created_at", None)
    events = build_checkpoint_events(
        [entry],
        session_key="",
        session_id="",
        turn_id="readback",
        # A falsy created_at is "now" to the writer; here it can only fail to match.
        clock_ms=int(created or 0),
    )
    return events_fingerprint(events)


def transcript_entry_id(entry: Any) -> int:
    """The id a transcript entry has in its gateway's own transcript: the id checkpoints name
    (``through-<id>``) and hash (``coverage_hash``). The one place that says which column
    that is; a pre-image row (``PreimageEntry``) already carries its original id as ``id``."""
    original = getattr(entry, "original_entry_id", None)
    if original is not None:
        return int(original)
    # A transcript entry: its gateway's own id (TranscriptEntry.own_id, the one rule).
    own = getattr(entry, "own_id", None)
    return int(own if own is not None else entry.id)


def transcript_entry_ref(entry: Any) -> str:
    """How a transcript entry is named on the page and in the API."""
    return str(transcript_entry_id(entry))
