"""``SessionFlushService``: distil a transcript into memory, or archive it raw (docs/UPSTREAM.md#flush).

Fallback chain: pre-image archive -> LLM extraction + one ``memory_save`` -> raw archive ->
``archive_failed``. Every outcome goes through ``_done``, which stamps the receipt's
identity and hands the ledger row to ``receipt_writer``.

Django-free: the ledger, the session identity and the workspace all come in as
callables, each of which may be sync or async.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from ..statuses import PREIMAGE_SAVED
from .archive import DEFAULT_RAW_ARCHIVE_MAX_CHARS
from .calls import FlushRun, ToolHandler, error_fields, raw_status, resolved
from .correlation import (
    ProviderRequestCorrelation,
    bind_provider_request_correlation,
    coerce_correlation,
)
from .llm import llm_flush
from .normalize import normalize_transcript
from .raw import RawArchiver
from .safety import ledger_row_fields
from .types import (
    FlushReceipt,
    FlushResultStatus,
    Message,
    ProviderCompletionError,
    RawCapturePolicy,
    RawReason,
    SegmentMode,
)

logger = logging.getLogger(__name__)


class SessionFlushService:
    """Extract, distil and persist session memory before a reset or compaction."""

    def __init__(
        self,
        *,
        provider_selector: Callable[[str], Any | None],
        tool_registry: Any,
        tool_handler: ToolHandler,
        default_message_window: int = 30,
        default_timeout: float = 30.0,
        receipt_writer: Callable[..., Any] | None = None,
        session_identity_resolver: Callable[[str], Any] | None = None,
        checkpoint_exists_resolver: Callable[[str, str | None], Any] | None = None,
        archive_workspace_resolver: Callable[[str], Any] | None = None,
        archive_writer: Callable[..., Any] | None = None,
        raw_archive_max_chars: int = DEFAULT_RAW_ARCHIVE_MAX_CHARS,
    ) -> None:
        self._provider_selector = provider_selector
        self._tool_registry = tool_registry
        self._tool_handler = tool_handler
        self._default_message_window = default_message_window
        self._default_timeout = default_timeout
        self._receipt_writer = receipt_writer
        self._session_identity_resolver = session_identity_resolver
        self._checkpoint_exists_resolver = checkpoint_exists_resolver
        self._raw = RawArchiver(
            workspace_resolver=archive_workspace_resolver,
            writer=archive_writer,
            max_chars=max(1, int(raw_archive_max_chars or DEFAULT_RAW_ARCHIVE_MAX_CHARS)),
        )

    async def execute(
        self,
        transcript: list[Any],
        session_key: str,
        agent_id: str = "main",
        *,
        timeout: float | None = None,
        message_window: int | None = None,
        flush_max_chars: int | None = None,
        segment_mode: SegmentMode = "off",
        segment_max_chars: int | None = None,
        segment_overlap_messages: int = 0,
        checkpoint_exists: bool | None = None,
        turn_id: str | None = None,
        raw_capture_policy: RawCapturePolicy = "best_effort",
        provider_request_correlation: ProviderRequestCorrelation | Mapping[str, Any] | None = None,
    ) -> FlushReceipt:
        """Flush ``transcript`` and return the receipt; flush failures never raise.

        Raises ``ValueError`` for bad arguments and lets ``asyncio.CancelledError``
        propagate. ``provider_request_correlation`` is bound while the provider is called
        (the provider sends it, ``flush.correlation``) and logged with the outcome; a
        mapping with the same field names is accepted, and an empty ``turn_id`` takes this
        flush's own turn id.
        """
        run = FlushRun(
            agent_id=agent_id,
            session_key=session_key,
            turn_id=turn_id or "flush:0-0",
            source_path=f"session:{session_key}:{turn_id or 'flush:0-0'}",
            checkpoint_exists=checkpoint_exists,
        )
        if not transcript:
            skipped = FlushReceipt(
                mode="skipped",
                flushed_paths=[],
                slug=None,
                message_count=0,
                duration_ms=0,
                raw_reason=None,
                error=None,
                result_status="skipped",
            )
            return await self._done(skipped, run, provider_request_correlation)

        window = self._default_message_window if message_window is None else message_window
        _validate_arguments(
            window=window,
            flush_max_chars=flush_max_chars,
            segment_mode=segment_mode,
            segment_max_chars=segment_max_chars,
            segment_overlap_messages=segment_overlap_messages,
            raw_capture_policy=raw_capture_policy,
        )
        started = time.monotonic()
        normalized = normalize_transcript(transcript)
        messages = normalized if window == 0 else normalized[-window:]
        # Numbers are 1-based over the whole normalised transcript, not the window.
        run.input_message_count = len(normalized)
        run.selected_start_index = len(normalized) - len(messages) + 1 if messages else None
        run.session_id = await self._resolve_session_id(session_key)
        run.turn_id = turn_id or f"flush:{run.selected_start_index or 1}-{len(normalized)}"
        run.source_path = f"session:{session_key}:{run.turn_id}"
        if checkpoint_exists is None:
            # Resolved once per execute, so every row of this flush agrees on it.
            run.checkpoint_exists = await self._resolve_checkpoint_exists(
                session_key, run.session_id
            )

        preimage: FlushReceipt | None = None
        if raw_capture_policy != "off":
            preimage = self._stamp(
                await self._raw.archive(messages, reason="preimage", run=run), run
            )
            if preimage.result_status == "archive_failed":
                if raw_capture_policy == "required":
                    # The caller demanded a durable pre-image; without one, stop here.
                    return await self._done(preimage, run, provider_request_correlation)
                preimage = None
            else:
                # Before the provider call, so a crash mid-flush still leaves a row behind.
                await self._write_preimage_row(preimage, run)

        correlation = coerce_correlation(provider_request_correlation, turn_id=run.turn_id)
        try:
            with bind_provider_request_correlation(correlation):
                receipt = await self._flush(
                    messages,
                    run,
                    preimage=preimage,
                    timeout=self._default_timeout if timeout is None else timeout,
                    flush_max_chars=flush_max_chars,
                    segment_mode=segment_mode,
                    segment_max_chars=segment_max_chars,
                    segment_overlap_messages=segment_overlap_messages,
                )
        except asyncio.CancelledError:
            # Compaction budgets and resets cancel flushes; that must never be swallowed.
            raise
        except Exception as exc:
            logger.error(
                "session_flush.error", extra={"session_key": session_key, "error": str(exc)}
            )
            receipt = FlushReceipt(
                mode="error",
                flushed_paths=[],
                slug=None,
                message_count=len(messages),
                duration_ms=int((time.monotonic() - started) * 1000),
                raw_reason=None,
                error=str(exc) or type(exc).__name__,
                result_status="archive_failed",
                input_message_count=run.input_message_count,
                truncation_policy="error",
            )
        return await self._done(receipt, run, correlation)

    async def _flush(
        self,
        messages: list[Message],
        run: FlushRun,
        *,
        preimage: FlushReceipt | None,
        timeout: float,
        flush_max_chars: int | None,
        segment_mode: SegmentMode,
        segment_max_chars: int | None,
        segment_overlap_messages: int,
    ) -> FlushReceipt:
        async def degraded(
            reason: RawReason,
            exc: BaseException | None = None,
            status: FlushResultStatus | None = None,
        ) -> FlushReceipt:
            # Reuse the pre-image rather than writing the same transcript twice.
            if preimage is not None:
                return replace(
                    preimage,
                    raw_reason=reason,
                    result_status=status or raw_status(reason),
                    **error_fields(exc),
                )
            return await self._raw.archive(
                messages, reason=reason, run=run, raw_error=exc, result_status=status
            )

        # Asked per flush, so a provider configured after boot is picked up without restart.
        provider = self._provider_selector(run.agent_id)
        if provider is None:
            return await degraded("no_provider")
        if not self._has_memory_save_tool():
            return await degraded("no_tools")
        try:
            return await asyncio.wait_for(
                llm_flush(
                    messages,
                    provider,
                    run,
                    tool_handler=self._tool_handler,
                    flush_max_chars=flush_max_chars,
                    segment_mode=segment_mode,
                    segment_max_chars=segment_max_chars,
                    segment_overlap_messages=segment_overlap_messages,
                ),
                timeout=timeout,
            )
        except TimeoutError as exc:
            # The provider may still be mid-request; wait_for has already cancelled it.
            return await degraded("timeout", exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # Order matters: ProviderCompletionError is itself a RuntimeError.
            if isinstance(exc, ProviderCompletionError):
                status: FlushResultStatus = "provider_failed_archived"
            elif isinstance(exc, RuntimeError):
                status = "apply_failed_archived"
            else:
                status = "parse_failed_archived"
            fields = error_fields(exc)
            logger.warning(
                "session_flush.llm_failed", extra={"error": fields["raw_error_message"], **fields}
            )
            return await degraded("llm_error", exc, status)

    async def _raw_dump_fallback(
        self,
        messages: list[Message],
        *,
        reason: RawReason,
        session_key: str,
        agent_id: str = "main",
        raw_error: BaseException | None = None,
        result_status: FlushResultStatus | None = None,
        checkpoint_exists: bool | None = None,
        record_receipt: bool = True,
    ) -> FlushReceipt:
        """Archive directly, outside ``execute`` (upstream's test hook, docs/UPSTREAM.md#flush-outcomes-and-ledger-rows).

        With ``record_receipt`` the ledger row is written too; failures are not cached,
        so each failing call writes another row.
        """
        run = FlushRun(
            agent_id=agent_id,
            session_key=session_key,
            turn_id="flush:0-0",
            source_path=f"session:{session_key}:flush:0-0",
            checkpoint_exists=checkpoint_exists,
            input_message_count=len(messages),
        )
        receipt = self._stamp(
            await self._raw.archive(
                messages, reason=reason, run=run, raw_error=raw_error, result_status=result_status
            ),
            run,
        )
        if record_receipt:
            await self._write_ledger(receipt, run)
        return receipt

    def _has_memory_save_tool(self) -> bool:
        try:
            definitions = self._tool_registry.to_tool_definitions()
        except Exception:
            return False
        for definition in definitions or []:
            if isinstance(definition, Mapping):
                name = definition.get("name")
            else:
                name = getattr(definition, "name", None)
            if name == "memory_save":
                return True
        return False

    # --- identity and ledger -------------------------------------------------------------

    async def _resolve_session_id(self, session_key: str) -> str | None:
        if self._session_identity_resolver is None:
            return None
        result = await resolved(self._session_identity_resolver(session_key))
        return str(result) if result else None

    async def _resolve_checkpoint_exists(
        self, session_key: str, session_id: str | None
    ) -> bool | None:
        if self._checkpoint_exists_resolver is None:
            return None
        return bool(await resolved(self._checkpoint_exists_resolver(session_key, session_id)))

    @staticmethod
    def _stamp(receipt: FlushReceipt, run: FlushRun) -> FlushReceipt:
        """Stamp session_id, turn_id, source_path and a content hash (docs/UPSTREAM.md#flush-outcomes-and-ledger-rows)."""
        content_hash = receipt.content_hash
        # Every row needs a hash for idempotency; synthesise one when the write had none.
        if content_hash is None and receipt.mode == "llm" and receipt.flushed_paths:
            parts = [
                receipt.result_status,
                *receipt.flushed_paths,
                str(receipt.indexed_chunk_count),
                run.turn_id,
            ]
            content_hash = hashlib.sha256("|".join(parts).encode("utf-8")).hexdigest()
        return replace(
            receipt,
            session_id=receipt.session_id or run.session_id,
            turn_id=receipt.turn_id or run.turn_id,
            source_path=receipt.source_path or run.source_path,
            content_hash=content_hash,
            selected_start_index=receipt.selected_start_index or run.selected_start_index,
        )

    async def _done(
        self,
        receipt: FlushReceipt,
        run: FlushRun,
        correlation: ProviderRequestCorrelation | Mapping[str, Any] | None = None,
    ) -> FlushReceipt:
        receipt = self._stamp(receipt, run)
        if isinstance(correlation, ProviderRequestCorrelation):
            correlation = correlation.to_dict()
        logger.info(
            "session_flush.done",
            extra={
                "agent_id": run.agent_id,
                "session_key": run.session_key,
                "flush_mode": receipt.mode,
                "result_status": receipt.result_status,
                "raw_reason": receipt.raw_reason,
                "flush_error": receipt.error,
                "flushed_paths": list(receipt.flushed_paths),
                "duration_ms": receipt.duration_ms,
                "integrity_status": receipt.integrity_status,
                "indexed_chunk_count": receipt.indexed_chunk_count,
                "provider_request_correlation": dict(correlation or {}),
            },
        )
        await self._write_ledger(receipt, run)
        return receipt

    async def _call_writer(
        self, receipt: FlushReceipt, run: FlushRun, fields: Mapping[str, Any]
    ) -> None:
        assert self._receipt_writer is not None
        await resolved(
            self._receipt_writer(
                receipt, agent_id=run.agent_id, session_key=run.session_key, **fields
            )
        )

    async def _write_ledger(self, receipt: FlushReceipt, run: FlushRun) -> None:
        if self._receipt_writer is None:
            return
        fields = ledger_row_fields(receipt, checkpoint_exists=run.checkpoint_exists)
        if fields is None:
            return
        try:
            await self._call_writer(receipt, run, fields)
        except Exception as exc:
            # The ledger is evidence, not a gate: a failed write must not fail the flush.
            logger.error(
                "session_flush.receipt_write_failed",
                extra={
                    "agent_id": run.agent_id,
                    "session_key": run.session_key,
                    "result_status": receipt.result_status,
                    "error": str(exc),
                },
            )

    async def _write_preimage_row(self, receipt: FlushReceipt, run: FlushRun) -> None:
        # Without a path there is nothing a repair could later read, so no row.
        if self._receipt_writer is None or not receipt.flushed_paths:
            return
        fields = {
            "scope": "preimage",
            "status": PREIMAGE_SAVED,
            "reason": receipt.raw_reason,
            "target_path": receipt.flushed_paths[0],
            "session_id": receipt.session_id,
            "turn_id": receipt.turn_id,
            "source_path": receipt.source_path,
            "content_hash": receipt.content_hash,
        }
        try:
            await self._call_writer(receipt, run, fields)
        except Exception as exc:
            logger.error(
                "session_flush.preimage_receipt_write_failed",
                extra={"agent_id": run.agent_id, "session_key": run.session_key, "error": str(exc)},
            )


def _validate_arguments(
    *,
    window: int,
    flush_max_chars: int | None,
    segment_mode: str,
    segment_max_chars: int | None,
    segment_overlap_messages: int,
    raw_capture_policy: str,
) -> None:
    if window < 0:
        raise ValueError("message_window must be >= 0")
    if flush_max_chars is not None and flush_max_chars <= 0:
        raise ValueError("flush_max_chars must be > 0")
    if segment_mode not in {"off", "auto", "always"}:
        raise ValueError("segment_mode must be one of: off, auto, always")
    if segment_max_chars is not None and segment_max_chars <= 0:
        raise ValueError("segment_max_chars must be > 0")
    if segment_overlap_messages < 0:
        raise ValueError("segment_overlap_messages must be >= 0")
    if raw_capture_policy not in {"off", "best_effort", "required"}:
        raise ValueError("raw_capture_policy must be one of: off, best_effort, required")
