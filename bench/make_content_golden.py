"""Regenerate tests/golden/checkpoint_content_shapes.json with the reference implementation.

Run it with the reference venv (PyPI ``opensquilla==0.3.0``), never the project's:

    var/bench/ref-venv/bin/python bench/make_content_golden.py

Each case is one checkpoint batch whose messages carry a content shape upstream accepts:
plain text, every provider content block (pydantic models, also nested in lists and dicts),
content plus reasoning, empty and missing content, and the tool-call shapes a transcript
row can hold. Provider models are written as ``{"$model": <class>, "dump": <model_dump>}``
so the test can rebuild an equivalent model without importing upstream. The expected file
body is what upstream's ``append_checkpoint_events`` writes, byte for byte.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import opensquilla.memory.checkpoint as checkpoint
from opensquilla.provider.types import (
    ContentBlockCompaction,
    ContentBlockDocument,
    ContentBlockImage,
    ContentBlockText,
    ContentBlockThinking,
    ContentBlockToolResult,
    ContentBlockToolUse,
    Message,
)

OUT = Path(__file__).resolve().parent.parent / "tests" / "golden" / "checkpoint_content_shapes.json"
# Entries without created_at are stamped with the build time; pin it.
CLOCK_SECONDS = 1_700_000_000.5
SESSION_KEY = "agent:main:webchat:shapes"
SESSION_ID = "session-shapes"

ALL_BLOCKS = [
    ContentBlockText(text="visible block"),
    ContentBlockToolUse(id="toolu_1", name="search", input={"q": "tea", "n": [1, 2]}),
    ContentBlockToolResult(tool_use_id="toolu_1", content="3 results"),
    ContentBlockToolResult(
        tool_use_id="toolu_2",
        content=[ContentBlockText(text="nested"), {"type": "text", "text": "dict block"}],
        is_error=True,
    ),
    ContentBlockImage(media_type="image/png", data="aGVsbG8="),
    ContentBlockDocument(media_type="application/pdf", data="JVBERi0=", title="Spec"),
    ContentBlockThinking(thinking="weighing options", signature="sig-1"),
    ContentBlockCompaction(content="earlier turns", cache_control={"type": "ephemeral"}),
]


def entry(**fields: Any) -> SimpleNamespace:
    """A transcript row as the session manager hands it to the checkpoint (attribute access)."""
    return SimpleNamespace(**fields)


CASES: list[tuple[str, list[Any], str | None]] = [
    ("message_text", [Message(role="assistant", content="plain text answer")], "turn-1"),
    ("message_text_block", [Message(role="assistant", content=[ALL_BLOCKS[0]])], "turn-1"),
    ("message_every_block", [Message(role="assistant", content=ALL_BLOCKS)], "turn-1"),
    ("message_empty_blocks", [Message(role="user", content=[])], "turn-1"),
    (
        "message_text_and_reasoning",
        [Message(role="assistant", content="visible", reasoning_content="private chain")],
        "turn-1",
    ),
    (
        "message_blocks_and_reasoning",
        [Message(role="assistant", content=ALL_BLOCKS[:3], reasoning_content="why")],
        "turn-1",
    ),
    (
        "message_empty_reasoning",
        [Message(role="assistant", content="only visible", reasoning_content="")],
        "turn-1",
    ),
    (
        "entry_nested_models_in_dict_and_tuple",
        [
            entry(
                role="assistant",
                content={
                    "blocks": (ContentBlockText(text="in a tuple"),),
                    "meta": {"inner": ContentBlockThinking(thinking="deep")},
                    7: "int key",
                },
                created_at=1_700_000_000_123,
            )
        ],
        "turn-1",
    ),
    (
        "entry_reasoning_only",
        [
            entry(role="assistant", content=None, reasoning_content="thinking aloud"),
            entry(role="assistant", content=None, reasoning_content=None),
        ],
        "turn-1",
    ),
    (
        "entry_roles_ids_and_clock",
        [
            entry(id=3, role="system", content="be brief", created_at=0, token_count=2),
            entry(id=4, role="user", content="  padded \n", created_at=1_700_000_000_001),
            entry(id=5, role="tool", content='{"ok": true}', tool_call_id="call_1"),
            entry(id=6, role="custom", content="[not json", token_count="4"),
            entry(id=7, role="user", content=42),
            entry(id=8, role="user", content="unicode ✓ — 東京"),
        ],
        None,
    ),
    (
        "entry_tool_calls",
        [
            entry(
                role="assistant",
                content="",
                tool_calls=[
                    {
                        "id": "call_str",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"city": "Oslo"}'},
                    },
                    {
                        "id": "call_dict",
                        "function": {"name": "lookup", "arguments": {"city": "Bergen", "n": 2}},
                    },
                    {"id": "", "function": {"name": "no_args"}},
                    {"id": 17, "name": "top_level_name", "input": {"x": 1}},
                    {"function": {"arguments": ""}},
                    "not a call",
                ],
                created_at=1_700_000_000_200,
            )
        ],
        "turn-tools",
    ),
    (
        "entry_tool_calls_tuple_is_ignored",
        [
            entry(
                role="assistant",
                content="calls in a tuple",
                tool_calls=({"id": "call_t", "function": {"name": "n", "arguments": "{}"}},),
                created_at=1_700_000_000_300,
            )
        ],
        "turn-1",
    ),
]


def encode(value: Any) -> Any:
    """JSON for the inputs; provider models become ``{"$model", "dump"}``."""
    if hasattr(value, "model_dump"):
        return {"$model": type(value).__name__, "dump": value.model_dump(mode="json")}
    if isinstance(value, tuple):
        return {"$tuple": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        if any(not isinstance(k, str) for k in value):
            return {"$dict": [[k, encode(v)] for k, v in value.items()]}
        return {k: encode(v) for k, v in value.items()}
    return value


def encode_entry(item: Any) -> dict[str, Any]:
    if isinstance(item, Message):
        fields = {
            "role": item.role,
            "content": item.content,
            "reasoning_content": item.reasoning_content,
        }
    else:
        fields = dict(vars(item))
    return {k: encode(v) for k, v in fields.items()}


def main() -> int:
    # ``--out PATH`` writes elsewhere (the suite's smoke run compares it with the committed
    # file); by default the committed file is rewritten.
    out_path = Path(sys.argv[sys.argv.index("--out") + 1]) if "--out" in sys.argv else OUT
    checkpoint.time = lambda: CLOCK_SECONDS  # type: ignore[attr-defined]
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, entries, turn_id in CASES:
            events = checkpoint.build_checkpoint_events(
                session_key=SESSION_KEY,
                session_id=SESSION_ID,
                entries=entries,
                source="session_manager",
                turn_id=turn_id,
            )
            result = checkpoint.append_checkpoint_events(Path(tmp) / name, events)
            body = (Path(tmp) / name / result.relative_path).read_text(encoding="utf-8")
            out.append(
                {
                    "name": name,
                    "session_key": SESSION_KEY,
                    "session_id": SESSION_ID,
                    "turn_id_arg": turn_id,
                    "clock_ms": int(CLOCK_SECONDS * 1000),
                    "entries": [encode_entry(e) for e in entries],
                    "relative_path": result.relative_path,
                    "content_hash": result.content_hash,
                    "event_count": result.event_count,
                    "file_body": body,
                }
            )
    out_path.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(out)} cases to {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
