"""``record_memory_checkpoint``: snapshot a session and record a fenced receipt (5.4).

The sync form runs the async implementation, so the shared deadline, the failure receipt and
the fencing rules exist once. The writer and the receipt upsert are looked up at call time: the
writer on the package ``receipts_app.checkpoint`` itself (the seam the Python API contract names, as
upstream's tests patch ``opensquilla.memory.checkpoint``), the upsert on ``receipts_app.ledger``,
so a test can replace either.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import time
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from asgiref.sync import async_to_sync
from django.conf import settings

from opensquilla_site.identifiers import IDEMPOTENCY_KEY_MAX, control_character_problem
from sessions_app import services as session_services
from sessions_app.keys import canonicalize_session_key

from .. import ledger
from ..models import MemoryDurableReceipt
from ..statuses import CHECKPOINT_FAILED, CHECKPOINT_SAVED
from .events import DEFAULT_SOURCE, build_checkpoint_events, serialise_checkpoint_events
from .hashing import checkpoint_coverage_hash, checkpoint_event_hash, checkpoint_turn_id

T = TypeVar("T")
logger = logging.getLogger(__name__)


def _checkpoint_package() -> Any:
    """``receipts_app.checkpoint`` as it is now (imported lazily: it imports this module)."""
    return importlib.import_module(__package__ or "receipts_app.checkpoint")


class CheckpointTimeoutError(TimeoutError):
    """The shared checkpoint deadline ran out; ``phase`` is always ``"checkpointing"``."""

    def __init__(self, phase: str = "checkpointing") -> None:
        super().__init__(f"checkpoint deadline exceeded during {phase}")
        self.phase = phase


class _Deadline:
    """One budget shared by every phase of a checkpoint (docs/UPSTREAM.md#deadline)."""

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


def saved_checkpoint_key(session_key: str, turn_id: str, content_hash: str) -> str:
    """A saved checkpoint's idempotency key (upstream's format)."""
    return f"checkpoint:{session_key}:{turn_id}:{content_hash}"


def failed_checkpoint_key(session_key: str, turn_id: str, body_hash: str, error_tag: str) -> str:
    """A failed checkpoint's idempotency key (upstream's format)."""
    return f"checkpoint:{session_key}:{turn_id}:{body_hash}:failed:{error_tag}"


# The longest hashes those keys carry: a SHA-256 hex digest and a 16-character error tag.
_LONGEST_KEY = failed_checkpoint_key("", "", "0" * 64, "0" * 16)


def turn_id_problem(session_key: str, turn_id: str | None) -> str | None:
    """Why a checkpoint of ``session_key`` cannot take ``turn_id`` (None: it can).

    The turn id flows into the receipt's idempotency key, which every door bounds at
    ``IDEMPOTENCY_KEY_MAX`` characters; a longer key would be stored here, yet no surface could
    name it again. So a turn id is refused before anything is queued or written.
    """
    if not turn_id:
        return None
    problem = control_character_problem(turn_id)
    if problem is not None:
        return f"turn_id {problem}"
    longest = len(_LONGEST_KEY) + len(session_key) + len(turn_id)
    if longest > IDEMPOTENCY_KEY_MAX:
        room = max(0, IDEMPOTENCY_KEY_MAX - len(_LONGEST_KEY) - len(session_key))
        return (
            f"turn_id is too long: {len(turn_id)} characters; with this session key the "
            f"receipt's idempotency key allows at most {room}"
        )
    return None


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
        idempotency_key=failed_checkpoint_key(session_key, turn_id, body_hash, error_tag),
        status=CHECKPOINT_FAILED,
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
        idempotency_key=saved_checkpoint_key(session_key, turn_id, written["content_hash"]),
        status=CHECKPOINT_SAVED,
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
        # Looked up on the package at call time (the contract's seam: a test that replaces
        # ``receipts_app.checkpoint.append_checkpoint_events`` replaces this write); it runs in a
        # worker thread so the event loop never blocks on disk.
        written = await deadline.run(
            asyncio.to_thread(_checkpoint_package().append_checkpoint_events, workspace, events)
        )
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
