"""The checkpoint JSONL writer: sanitised paths and an atomic, idempotent replace (5.3)."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .events import serialise_checkpoint_events

CHECKPOINT_DIR = "memory/.checkpoints"
_UNSAFE_RUN = re.compile(r"[^A-Za-z0-9_.-]+")


def _safe_segment(value: Any) -> str:
    cleaned = _UNSAFE_RUN.sub("-", "" if value is None else str(value)).strip("-")
    if cleaned in ("", ".", ".."):
        return "unknown"
    return cleaned


def checkpoint_relative_path(session_key: str, turn_id: str) -> str:
    return f"{CHECKPOINT_DIR}/{_safe_segment(session_key)}/{_safe_segment(turn_id)}.jsonl"


def _resolve_inside(workspace: Path, relative: str) -> Path:
    root = workspace.resolve()
    target = (root / relative).resolve()
    if root != target and root not in target.parents:
        raise ValueError(f"checkpoint path escapes the workspace: {relative}")
    return target


def append_checkpoint_events(
    workspace: str | os.PathLike[str], events: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """Write ``events`` as one JSONL file, atomically; a no-op when the bytes are unchanged.

    Despite the upstream name the file is replaced, never appended to. Returns
    ``{relative_path, event_count, content_hash}`` where the hash is sha256 of the file bytes.
    """
    if not events:
        raise ValueError("checkpoint events cannot be empty")
    keys = {(e.get("session_key"), e.get("turn_id")) for e in events}
    if len(keys) != 1:
        raise ValueError("checkpoint events in one batch must share session_key and turn_id")
    session_key, turn_id = next(iter(keys))
    relative = checkpoint_relative_path(str(session_key), str(turn_id))
    body = "".join(line + "\n" for line in serialise_checkpoint_events(events)).encode("utf-8")
    digest = hashlib.sha256(body).hexdigest()
    result = {"relative_path": relative, "event_count": len(events), "content_hash": digest}
    target = _resolve_inside(Path(workspace), relative)
    if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == digest:
        return result
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(body)
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return result
