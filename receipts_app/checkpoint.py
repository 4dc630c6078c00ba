"""Deterministic checkpoints: JSONL transcript snapshots plus their receipts (DOMAIN.md 5).

The hashes, ids, paths and file bytes are byte-compatible with OpenSquilla 0.3.0; the golden
tests pin them. ``record_memory_checkpoint`` is the async implementation run to completion,
so the deadline, failure-receipt and fencing rules live in one place.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import tempfile
import time
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from asgiref.sync import async_to_sync
from django.conf import settings

from sessions_app import services as session_services
from sessions_app.keys import canonicalize_session_key

from . import ledger
from .models import MemoryDurableReceipt

T = TypeVar("T")
logger = logging.getLogger(__name__)

CHECKPOINT_DIR = "memory/.checkpoints"
DEFAULT_SOURCE = "session_manager"
_UNSAFE_RUN = re.compile(r"[^A-Za-z0-9_.-]+")
_ROLE_MAP = {"tool": "tool_result", "user": "user", "assistant": "assistant"}


class CheckpointTimeoutError(TimeoutError):
    """The shared checkpoint deadline ran out; ``phase`` is always ``"checkpointing"``."""

    def __init__(self, phase: str = "checkpointing") -> None:
        super().__init__(f"checkpoint deadline exceeded during {phase}")
        self.phase = phase


# --- hashing -----------------------------------------------------------------------------


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


def checkpoint_turn_id(entries: Sequence[Any]) -> str:
    ids = [_field(e, "id") for e in entries]
    int_ids = [i for i in ids if isinstance(i, int) and not isinstance(i, bool)]
    if int_ids:
        return f"through-{max(int_ids)}"
    return "turn-" + checkpoint_event_hash(_json([_coverage_item(e) for e in entries]))[:16]


def checkpoint_coverage_hash(entries: Sequence[Any]) -> str:
    items = [{**_coverage_item(e), "id": _field(e, "id")} for e in entries]
    return checkpoint_event_hash(_json(items))


# --- events ------------------------------------------------------------------------------


def _serialise_content(value: Any) -> str:
    if isinstance(value, str):
        return value
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    return _json(value)


def _event_content(entry: Any) -> str:
    content = _field(entry, "content")
    reasoning = _field(entry, "reasoning_content")
    if content is not None and reasoning:
        return _json({"content": content, "reasoning_content": reasoning})
    if content is not None:
        return _serialise_content(content)
    if reasoning is not None:
        return _serialise_content(reasoning)
    return ""


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
        created_at = _field(entry, "created_at")
        timestamp = created_at if created_at is not None else built_at
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
            token_estimate=_field(entry, "token_count") or 0,
        )
        events.append(event)
        for call in _field(entry, "tool_calls") or []:
            if not isinstance(call, Mapping):
                continue
            sequence += 1
            function = call.get("function")
            if isinstance(function, Mapping) and function.get("arguments") is not None:
                call_content = _serialise_content(function.get("arguments"))
                tool_name = function.get("name")
            else:
                call_content = _json(call)
                tool_name = function.get("name") if isinstance(function, Mapping) else None
            tool_name = tool_name or call.get("name")
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
                tool_call_id=str(call_id) if call_id is not None else None,
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


# --- paths and the writer -----------------------------------------------------------------


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


# --- record_memory_checkpoint -------------------------------------------------------------


class _Deadline:
    """One budget shared by every phase of a checkpoint (DOMAIN.md 5.4 step 8)."""

    def __init__(self, timeout: float | None) -> None:
        self.expires_at = None if timeout is None else time.monotonic() + max(0.0, timeout)

    def remaining(self) -> float | None:
        if self.expires_at is None:
            return None
        return max(0.0, self.expires_at - time.monotonic())

    async def run(self, awaitable: Awaitable[T]) -> T:
        remaining = self.remaining()
        if remaining is None:
            return await awaitable
        if remaining <= 0:
            # Close the phase unstarted, as upstream does, so it never runs later.
            if asyncio.iscoroutine(awaitable):
                awaitable.close()
            raise CheckpointTimeoutError("checkpointing")
        try:
            return await asyncio.wait_for(awaitable, remaining)
        except TimeoutError as exc:
            if isinstance(exc, CheckpointTimeoutError):
                raise
            raise CheckpointTimeoutError("checkpointing") from exc


def _configured_workspace(workspace_dir: str | os.PathLike[str] | None) -> Path:
    chosen = workspace_dir or getattr(settings, "OPENSQUILLA_CHECKPOINT_WORKSPACE", None)
    if not chosen:
        raise RuntimeError("checkpoint workspace_dir is not configured")
    return Path(chosen)


def _failure_receipt(
    *,
    session_key: str,
    session_id: str,
    turn_id: str,
    body_hash: str,
    coverage: tuple[str, str, int],
    error: BaseException,
) -> MemoryDurableReceipt:
    error_tag = checkpoint_event_hash(str(error))[:16]
    return MemoryDurableReceipt(
        session_key=session_key,
        session_id=session_id,
        turn_id=turn_id,
        scope="checkpoint",
        source_path=None,
        target_path=None,
        content_hash=None,
        coverage_turn_id=coverage[0],
        coverage_hash=coverage[1],
        coverage_entry_count=coverage[2],
        idempotency_key=f"checkpoint:{session_key}:{turn_id}:{body_hash}:failed:{error_tag}",
        status="checkpoint_failed",
        reason=str(error),
        attempt_count=1,
    )


def _saved_receipt(
    *,
    session_key: str,
    session_id: str,
    turn_id: str,
    written: Mapping[str, Any],
    coverage: tuple[str, str, int],
) -> MemoryDurableReceipt:
    return MemoryDurableReceipt(
        session_key=session_key,
        session_id=session_id,
        turn_id=turn_id,
        scope="checkpoint",
        source_path=written["relative_path"],
        content_hash=written["content_hash"],
        coverage_turn_id=coverage[0],
        coverage_hash=coverage[1],
        coverage_entry_count=coverage[2],
        idempotency_key=f"checkpoint:{session_key}:{turn_id}:{written['content_hash']}",
        status="checkpoint_saved",
        attempt_count=1,
    )


async def arecord_memory_checkpoint(
    session_key: str,
    transcript: Sequence[Any] | None = None,
    *,
    turn_id: str | None = None,
    source: str = DEFAULT_SOURCE,
    workspace_dir: str | os.PathLike[str] | None = None,
    timeout: float | None = None,
) -> MemoryDurableReceipt:
    """Snapshot the session's transcript to JSONL and record a fenced receipt.

    Raises ``KeyError`` for a missing session, ``ValueError`` for an empty transcript (no
    receipt), and re-raises any write failure after recording a ``checkpoint_failed`` row.
    A session reset or deleted meanwhile makes the saved-receipt write raise the fence
    ``KeyError``; the file stays on disk and no receipt is restored.
    """
    deadline = _Deadline(timeout)
    key = canonicalize_session_key(session_key)
    session = await deadline.run(session_services.aget_session(key))
    if session is None:
        raise KeyError(f"Session not found: {key}")
    if transcript is None:
        entries: Sequence[Any] = await deadline.run(
            session_services.aget_transcript(session.session_id)
        )
    else:
        entries = list(transcript)
    if not entries:
        raise ValueError("checkpoint transcript cannot be empty")

    resolved_turn = turn_id or checkpoint_turn_id(entries)
    coverage = (checkpoint_turn_id(entries), checkpoint_coverage_hash(entries), len(entries))
    events = build_checkpoint_events(
        entries,
        session_key=key,
        session_id=session.session_id,
        turn_id=resolved_turn,
        source=source,
    )
    body_hash = checkpoint_event_hash("\n".join(serialise_checkpoint_events(events)))

    try:
        workspace = _configured_workspace(workspace_dir)
        # Looked up on the module at call time so tests can replace the writer; it runs in a
        # worker thread so the event loop never blocks on disk.
        written = await deadline.run(asyncio.to_thread(append_checkpoint_events, workspace, events))
    except Exception as error:
        failure = _failure_receipt(
            session_key=key,
            session_id=session.session_id,
            turn_id=resolved_turn,
            body_hash=body_hash,
            coverage=coverage,
            error=error,
        )
        remaining = deadline.remaining()
        if remaining is None or remaining > 0:
            try:
                await deadline.run(
                    ledger.aupsert_memory_durable_receipt(
                        failure, expected_session_id=session.session_id
                    )
                )
            except Exception as persist_error:  # noqa: BLE001 - the caller needs the original
                logger.warning(
                    "checkpoint failure receipt not written for %s: %s", key, persist_error
                )
        logger.warning("session_compaction.checkpoint_failed %s: %s", key, error)
        raise

    saved = _saved_receipt(
        session_key=key,
        session_id=session.session_id,
        turn_id=resolved_turn,
        written=written,
        coverage=coverage,
    )
    return await deadline.run(
        ledger.aupsert_memory_durable_receipt(saved, expected_session_id=session.session_id)
    )


def record_memory_checkpoint(
    session_key: str,
    transcript: Sequence[Any] | None = None,
    *,
    turn_id: str | None = None,
    source: str = DEFAULT_SOURCE,
    workspace_dir: str | os.PathLike[str] | None = None,
    timeout: float | None = None,
) -> MemoryDurableReceipt:
    """Synchronous form of :func:`arecord_memory_checkpoint` (same code path)."""
    return async_to_sync(arecord_memory_checkpoint)(
        session_key,
        transcript,
        turn_id=turn_id,
        source=source,
        workspace_dir=workspace_dir,
        timeout=timeout,
    )
