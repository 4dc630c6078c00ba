"""Byte-exact comparison with data produced by the reference (PyPI ``opensquilla==0.3.0``)."""

from __future__ import annotations

import hashlib
import json

import pytest

from receipts_app.checkpoint import (
    append_checkpoint_events,
    build_checkpoint_events,
    checkpoint_coverage_hash,
    checkpoint_event_hash,
    checkpoint_relative_path,
    checkpoint_turn_id,
    serialise_checkpoint_events,
)
from sessions_app.keys import canonicalize_session_key


def _load(golden_dir, name):
    return json.loads((golden_dir / name).read_text(encoding="utf-8"))


def test_session_keys_match_reference(golden_dir):
    cases = _load(golden_dir, "session_keys.json")
    assert cases
    mismatches = [
        (c["input"], canonicalize_session_key(c["input"]), c["canonical"])
        for c in cases
        if canonicalize_session_key(c["input"]) != c["canonical"]
    ]
    assert mismatches == []


def test_event_hashes_match_reference(golden_dir):
    for case in _load(golden_dir, "event_hashes.json"):
        assert checkpoint_event_hash(case["input"]) == case["checkpoint_event_hash"]


def test_checkpoint_paths_match_reference(golden_dir):
    for case in _load(golden_dir, "checkpoint_paths.json"):
        assert (
            checkpoint_relative_path(case["session_key"], case["turn_id"]) == case["relative_path"]
        )


def _cases(golden_dir_path):
    return json.loads((golden_dir_path / "checkpoints.json").read_text(encoding="utf-8"))


def _clock_for(case):
    """The reference stamped entries without ``created_at`` with its build time; reuse it."""
    for line in case["file_body"].splitlines():
        return json.loads(line)["timestamp_ms"]
    return None


@pytest.mark.parametrize("index", range(12))
def test_checkpoint_files_are_byte_identical(golden_dir, tmp_path, index):
    cases = _cases(golden_dir)
    assert len(cases) == 12
    case = cases[index]
    entries = case["entries"]

    assert checkpoint_turn_id(entries) == case["checkpoint_turn_id"]
    assert checkpoint_coverage_hash(entries) == case["checkpoint_coverage_hash"]
    assert len(entries) == case["coverage_entry_count"]

    events = build_checkpoint_events(
        entries,
        session_key=case["session_key"],
        session_id=case["session_id"],
        turn_id=case["turn_id_arg"],
        source=case["source"],
        clock_ms=_clock_for(case),
    )
    assert len(events) == case["event_count"]
    body_hash = checkpoint_event_hash("\n".join(serialise_checkpoint_events(events)))
    assert body_hash == case["event_body_hash"]

    written = append_checkpoint_events(tmp_path, events)
    assert written["relative_path"] == case["relative_path"]
    assert written["content_hash"] == case["file_content_hash"]
    data = (tmp_path / case["relative_path"]).read_bytes()
    assert data == case["file_body"].encode("utf-8")
    assert hashlib.sha256(data).hexdigest() == case["file_content_hash"]


def test_reference_workspace_checkpoints_hash_like_ours(golden_dir):
    """Every JSONL in the reference workspace re-serialises to the same bytes."""
    files = sorted(
        (golden_dir / "opensquilla-0.3.0/workspace/memory/.checkpoints").rglob("*.jsonl")
    )
    assert files
    for path in files:
        original = path.read_bytes()
        events = [json.loads(line) for line in original.decode("utf-8").splitlines()]
        for event in events:
            event.pop("content_hash")
        lines = serialise_checkpoint_events(events)
        assert "".join(line + "\n" for line in lines).encode("utf-8") == original, path.name
