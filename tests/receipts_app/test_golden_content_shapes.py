"""Checkpoint bytes for every content shape upstream accepts, against the reference.

``tests/golden/checkpoint_content_shapes.json`` is written by PyPI ``opensquilla==0.3.0``
(``bench/make_content_golden.py``): provider content blocks (pydantic models, also nested in
lists, tuples and dicts), content plus reasoning, missing content and the tool-call shapes.
A provider model is stored as its ``model_dump``; it is rebuilt here as a pydantic model that
dumps the same, so the product sees a real model, not a dict.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from receipts_app.checkpoint import append_checkpoint_events, build_checkpoint_events

SHAPES_FILE = "checkpoint_content_shapes.json"


class ProviderBlock(BaseModel):
    """Stands in for any upstream content block: the same fields, dumped the same way."""

    model_config = ConfigDict(extra="allow")


def decode(value: Any) -> Any:
    if isinstance(value, dict):
        if "$model" in value:
            return ProviderBlock.model_validate(value["dump"])
        if "$tuple" in value:
            return tuple(decode(v) for v in value["$tuple"])
        if "$dict" in value:
            return {key: decode(v) for key, v in value["$dict"]}
        return {key: decode(v) for key, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def _cases(golden_dir) -> list[dict[str, Any]]:
    return json.loads((golden_dir / SHAPES_FILE).read_text(encoding="utf-8"))


def test_golden_covers_provider_blocks_and_tool_calls(golden_dir):
    names = {case["name"] for case in _cases(golden_dir)}
    assert {"message_every_block", "message_blocks_and_reasoning", "entry_tool_calls"} <= names


@pytest.mark.parametrize("index", range(12))
def test_checkpoint_file_bytes_match_reference_for_content_shape(golden_dir, tmp_path, index):
    case = _cases(golden_dir)[index]
    entries = [SimpleNamespace(**decode(fields)) for fields in case["entries"]]

    events = build_checkpoint_events(
        entries,
        session_key=case["session_key"],
        session_id=case["session_id"],
        turn_id=case["turn_id_arg"],
        source="session_manager",
        clock_ms=case["clock_ms"],
    )
    written = append_checkpoint_events(tmp_path, events)

    body = (tmp_path / written["relative_path"]).read_text(encoding="utf-8")
    assert (case["name"], body) == (case["name"], case["file_body"])
    assert written["relative_path"] == case["relative_path"]
    assert written["content_hash"] == case["content_hash"]
    assert written["event_count"] == case["event_count"]
