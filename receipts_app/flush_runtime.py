"""The product's wiring of ``SessionFlushService`` (upstream ``gateway/boot.build_flush_service``).

The flush package is Django-free; this module gives it the product's pieces:
- the provider chosen from settings (``OPENSQUILLA_FLUSH_PROVIDER``), read on every call;
- the real ``memory_save`` tool, writing into the agent's memory workspace;
- the archive workspace (``OPENSQUILLA_MEMORY_WORKSPACE``, ``{agent}`` substituted, else the
  checkpoint workspace, else none: the flush then ends ``archive_failed`` and says so);
- the session-identity and checkpoint-exists resolvers, and the durable receipt writer
  (docs/UPSTREAM.md#receipt-writer), which upserts fenced on the generation captured when the flush began.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from opensquilla_site.exceptions import GenerationChanged
from sessions_app import services as session_services
from sessions_app.keys import canonicalize_session_key, normalize_agent_id
from sessions_app.models import TranscriptEntry

from . import ledger
from .flush import FlushReceipt, Message, SessionFlushService
from .flush.correlation import ProviderRequestCorrelation, session_flush_correlation
from .flush.memory_save import MemorySaveHandler, MemorySaveToolRegistry
from .flush.providers import correlation_disabled, select_flush_provider
from .models import MemoryDurableReceipt
from .statuses import CHECKPOINT_SAVED

logger = logging.getLogger(__name__)

FLUSH_RECEIPT_KEY_PREFIX = "flush-receipt"


# --- workspaces ----------------------------------------------------------------------------


def memory_workspace_template() -> str | None:
    """The configured memory workspace, ``~`` expanded; it may contain ``{agent}``.

    ``OPENSQUILLA_MEMORY_WORKSPACE``, else the checkpoint workspace, else none.
    """
    template = getattr(settings, "OPENSQUILLA_MEMORY_WORKSPACE", None) or getattr(
        settings, "OPENSQUILLA_CHECKPOINT_WORKSPACE", None
    )
    return str(Path(str(template)).expanduser()) if template else None


def memory_workspace_for_agent(agent_id: str | None) -> Path | None:
    """The agent's memory workspace: where raw-fallback archives and memory notes live.

    ``OPENSQUILLA_MEMORY_WORKSPACE`` may contain ``{agent}`` (the normalised agent id). When
    it is unset the checkpoint workspace is shared; when both are unset there is none.
    """
    template = memory_workspace_template()
    if not template:
        return None
    return Path(template.replace("{agent}", normalize_agent_id(agent_id)))


def archive_workspace_resolver(agent_id: str) -> Path | None:
    return memory_workspace_for_agent(agent_id)


# --- provider ------------------------------------------------------------------------------


def provider_selector(agent_id: str) -> Any | None:
    """The settings-driven provider; a misconfigured one degrades to "no provider".

    A bad ``OPENSQUILLA_FLUSH_*`` setting must not lose the transcript: with no provider
    the flush still archives it raw and queues a repair receipt, and the error is logged
    on every flush until the setting is fixed.
    """
    try:
        return select_flush_provider(agent_id)
    except ImproperlyConfigured as exc:
        logger.error("session_flush.provider_misconfigured: %s", exc)
        return None


# --- resolvers -----------------------------------------------------------------------------


def _current_session_id(session_key: str) -> str | None:
    session = session_services.get_session(session_key)
    return (session.session_id or None) if session is not None else None


def _checkpoint_exists(session_key: str, session_id: str | None) -> bool:
    if not session_id:
        return False
    # Any saved checkpoint of this generation counts; coverage is not checked (as upstream).
    rows = ledger.list_memory_durable_receipts(
        session_key=session_key,
        session_id=session_id,
        scope="checkpoint",
        status=CHECKPOINT_SAVED,
        limit=1,
    )
    return bool(rows)


async def session_identity_resolver(session_key: str) -> str | None:
    return await sync_to_async(_current_session_id)(session_key)


async def checkpoint_exists_resolver(session_key: str, session_id: str | None) -> bool:
    return await sync_to_async(_checkpoint_exists)(session_key, session_id)


# --- the durable receipt writer ------------------------------------------------------------


def _text_or_none(value: Any) -> str | None:
    # Empty strings are stored as NULL for every optional column (docs/UPSTREAM.md#receipt-writer).
    return str(value) if value else None


def flush_receipt_idempotency_key(
    receipt: Any,
    *,
    scope: str,
    session_key: str,
    session_id: str,
    turn_id: str | None,
    status: str,
    reason: str | None,
    source_path: str | None,
    target_path: str | None,
    content_hash: str | None,
) -> str:
    """Upstream's unescaped ``flush-receipt:…`` key; colons inside parts are kept as they are."""
    return ":".join(
        [
            FLUSH_RECEIPT_KEY_PREFIX,
            scope,
            session_key,
            session_id,
            turn_id or "",
            status,
            str(reason or ""),
            source_path or "",
            target_path or "",
            content_hash or "",
            str(getattr(receipt, "input_message_count", 0) or 0),
            str(getattr(receipt, "first_included_message", "") or ""),
            str(getattr(receipt, "last_included_message", "") or ""),
        ]
    )


def write_durable_flush_receipt(receipt: Any, **row: Any) -> MemoryDurableReceipt | None:
    """Record one flush outcome in the ledger; returns the stored row or None when skipped.

    Skips (with a logged reason) a flush that has no captured generation (the repair
    worker's ``raw-fallback:`` keys), whose session is gone, or whose session was reset
    while it ran. The upsert is fenced on the captured generation, so a reset or delete
    that lands between the check and the write also leaves no row; that fence error is
    logged here rather than raised, because the ledger must never fail a flush.
    """
    session_key = str(row.get("session_key") or "")
    if not session_key:
        return None
    result_status = getattr(receipt, "result_status", None)
    captured = str(row.get("session_id") or "")
    if not captured:
        logger.warning(
            "session_flush.receipt_write_skipped reason=session_id_missing key=%s status=%s",
            session_key,
            result_status,
        )
        return None
    current = _current_session_id(session_key)
    if not current:
        logger.warning(
            "session_flush.receipt_write_skipped reason=session_missing key=%s status=%s",
            session_key,
            result_status,
        )
        return None
    if current != captured:
        logger.warning(
            "session_flush.receipt_session_mismatch key=%s captured=%s current=%s status=%s",
            session_key,
            captured,
            current,
            result_status,
        )
        return None

    scope = str(row.get("scope") or "")
    status = str(row.get("status") or "")
    reason = _text_or_none(row.get("reason"))
    turn_id = _text_or_none(row.get("turn_id"))
    source_path = _text_or_none(row.get("source_path"))
    target_path = _text_or_none(row.get("target_path"))
    content_hash = _text_or_none(row.get("content_hash"))
    key = flush_receipt_idempotency_key(
        receipt,
        scope=scope,
        session_key=session_key,
        session_id=captured,
        turn_id=turn_id,
        status=status,
        reason=reason,
        source_path=source_path,
        target_path=target_path,
        content_hash=content_hash,
    )
    try:
        return ledger.upsert_memory_durable_receipt(
            MemoryDurableReceipt(
                session_key=session_key,
                session_id=captured,
                turn_id=turn_id,
                scope=scope,
                source_path=source_path,
                target_path=target_path,
                content_hash=content_hash,
                idempotency_key=key,
                status=status,
                reason=reason,
                attempt_count=1,
            ),
            expected_session_id=captured,
        )
    except GenerationChanged as exc:
        logger.warning(
            "session_flush.receipt_write_fenced key=%s status=%s: %s",
            session_key,
            result_status,
            exc,
        )
        return None


async def receipt_writer(receipt: Any, **row: Any) -> None:
    """The async form the flush service awaits; the DB work runs in Django's sync thread."""
    await sync_to_async(write_durable_flush_receipt)(receipt, **row)


# --- service -------------------------------------------------------------------------------


def build_flush_service(**overrides: Any) -> SessionFlushService:
    """The flush service as the product runs it; ``overrides`` replace constructor arguments.

    The repair worker overrides ``archive_writer``; tests override the provider selector.
    """
    kwargs: dict[str, Any] = {
        "provider_selector": provider_selector,
        "tool_registry": MemorySaveToolRegistry(),
        "tool_handler": MemorySaveHandler(archive_workspace_resolver),
        "default_timeout": float(getattr(settings, "OPENSQUILLA_FLUSH_TIMEOUT", 120.0) or 120.0),
        "receipt_writer": receipt_writer,
        "session_identity_resolver": session_identity_resolver,
        "checkpoint_exists_resolver": checkpoint_exists_resolver,
        "archive_workspace_resolver": archive_workspace_resolver,
    }
    kwargs.update(overrides)
    return SessionFlushService(**kwargs)


def flush_request_correlation(
    session_id: str | None, turn_id: str = ""
) -> ProviderRequestCorrelation | None:
    """The correlation a flush of ``session_id`` sends its provider (docs/WORKERS.md).

    None when the privacy switch is on or there is no session id. An empty ``turn_id`` is
    filled by the flush with its own turn id.
    """
    if correlation_disabled():
        return None
    return session_flush_correlation(session_id, turn_id)


def transcript_messages(entries: Sequence[TranscriptEntry]) -> list[Message]:
    """Transcript rows as flush messages; the service itself drops non-chat roles."""
    return [
        Message(
            role=entry.role,
            content=entry.content,
            message_id=entry.message_id,
            created_at=entry.created_at,
            tool_calls=entry.tool_calls,
            tool_call_id=entry.tool_call_id,
        )
        for entry in entries
    ]


async def aflush_session(
    session_key: str,
    *,
    turn_id: str | None = None,
    message_window: int | None = None,
    raw_capture_policy: str = "best_effort",
    service: SessionFlushService | None = None,
) -> FlushReceipt:
    """Flush the live generation's transcript of ``session_key``; ledger rows follow 6.5.

    Raises ``KeyError("Session not found: <key>")`` for an unknown session and
    ``ValueError`` for bad arguments. Provider, parse and workspace failures never raise:
    they come back as a degraded receipt plus their ledger rows.
    """
    key = canonicalize_session_key(session_key)
    session = await session_services.aget_session(key)
    if session is None:
        raise KeyError(f"Session not found: {key}")
    entries = await session_services.aget_transcript(session.session_id)
    flush = service or build_flush_service()
    return await flush.execute(
        transcript_messages(entries),
        key,
        session.agent_id or "main",
        turn_id=turn_id,
        message_window=message_window,
        segment_mode="auto",
        raw_capture_policy=raw_capture_policy,  # type: ignore[arg-type]
        provider_request_correlation=flush_request_correlation(session.session_id, turn_id or ""),
    )


def flush_session(
    session_key: str,
    *,
    turn_id: str | None = None,
    message_window: int | None = None,
    raw_capture_policy: str = "best_effort",
    service: SessionFlushService | None = None,
) -> FlushReceipt:
    """Synchronous form of :func:`aflush_session` for tasks and commands."""
    return async_to_sync(aflush_session)(
        session_key,
        turn_id=turn_id,
        message_window=message_window,
        raw_capture_policy=raw_capture_policy,
        service=service,
    )
