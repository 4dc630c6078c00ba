"""The raw half of a flush: archive the window verbatim (well, cut to 500 per message).

Successful archives are cached in-process (256 entries, first in first out) so that a
retry storm over the same transcript does no file I/O. Failures are never cached. Unlike
upstream, a cache hit reports the current call's result_status and error fields.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from .archive import dump_transcript_excerpt, raw_archive_header, write_raw_fallback_archive
from .calls import FlushRun, audit_fields, error_fields, raw_status, resolved
from .types import FlushReceipt, FlushResultStatus, Message, RawReason

logger = logging.getLogger(__name__)

RAW_FALLBACK_DEDUPE_MAX_ENTRIES = 256


class RawArchiver:
    def __init__(
        self,
        *,
        workspace_resolver: Callable[[str], Any] | None,
        writer: Callable[..., Any] | None,
        max_chars: int,
    ) -> None:
        self._workspace_resolver = workspace_resolver
        self._writer: Callable[..., Any] = writer or write_raw_fallback_archive
        self._max_chars = max_chars
        self._cache: dict[tuple[str, str, str, str], FlushReceipt] = {}

    async def _workspace(self, agent_id: str) -> Path | None:
        if self._workspace_resolver is None:
            return None
        value = await resolved(self._workspace_resolver(agent_id))
        return None if value is None else Path(value).expanduser()

    async def _write(self, workspace: Path, **kwargs: Any) -> tuple[str, str]:
        """Run the writer and return ``(relative_path, content_hash)``."""
        if inspect.iscoroutinefunction(self._writer):
            result = await self._writer(workspace, **kwargs)
        else:
            # File I/O plus fsync: keep it off the event loop.
            result = await resolved(await asyncio.to_thread(self._writer, workspace, **kwargs))
        if isinstance(result, Mapping):
            return str(result["relative_path"]), str(result["content_hash"])
        return str(result.relative_path), str(result.content_hash)

    async def archive(
        self,
        messages: list[Message],
        *,
        reason: RawReason,
        run: FlushRun,
        raw_error: BaseException | None = None,
        result_status: FlushResultStatus | None = None,
    ) -> FlushReceipt:
        """Archive ``messages``; return a ``raw`` receipt, or ``archive_failed`` (mode error).

        Never raises for I/O problems: a missing workspace, a resolver that raises or an
        unwritable directory all become an ``archive_failed`` receipt.
        """
        status = result_status or (
            "ok_archive_only" if reason == "timeout" and raw_error is None else raw_status(reason)
        )
        logger.info(
            "session_flush.raw_fallback",
            extra={"reason": reason, "agent_id": run.agent_id, "session_key": run.session_key},
        )
        started = time.monotonic()
        excerpt = dump_transcript_excerpt(messages, max_chars=self._max_chars)
        content = raw_archive_header(reason) + excerpt.text
        content_hash = hashlib.sha256(content.encode("utf-8")).hexdigest()
        cache_key = (run.agent_id, run.session_key, reason, content_hash)
        cached = self._cache.get(cache_key)
        if cached is not None:
            # Deliberate fix over upstream: the file is reused, but the outcome and error
            # are this call's, so a later provider failure is not reported as a parse one.
            return replace(cached, result_status=status, **error_fields(raw_error))

        path: str | None = None
        failure: str | None = None
        try:
            workspace = await self._workspace(run.agent_id)
            if workspace is None:
                failure = "archive workspace is not configured"
            else:
                path, content_hash = await self._write(
                    workspace, content=content, reason=reason, session_key=run.session_key
                )
        except Exception as exc:
            failure = str(exc) or type(exc).__name__

        common: dict[str, Any] = {
            "slug": None,
            "message_count": len(messages),
            "duration_ms": int((time.monotonic() - started) * 1000),
            "content_hash": content_hash,
            **error_fields(raw_error),
            **audit_fields(
                prompt_message_count=excerpt.prompt_message_count,
                prompt_char_count=len(excerpt.text),
                first=excerpt.first_included_message,
                last=excerpt.last_included_message,
                input_message_count=run.input_message_count or len(messages),
                selected_start_index=run.selected_start_index,
                truncated=excerpt.truncated,
                truncation_policy=excerpt.truncation_policy,
            ),
        }
        # The hash of the intended content is kept even on failure, for the error row.
        if failure is not None or path is None:
            logger.error(
                "session_flush.raw_fallback_archive_failed",
                extra={"reason": reason, "session_key": run.session_key, "error": failure},
            )
            return FlushReceipt(
                mode="error",
                flushed_paths=[],
                raw_reason=None,
                error=f"raw fallback archive write failed: {failure}",
                result_status="archive_failed",
                **common,
            )
        receipt = FlushReceipt(
            mode="raw",
            flushed_paths=[path],
            raw_reason=reason,
            error=None,
            result_status=status,
            **common,
        )
        self._cache[cache_key] = receipt
        if len(self._cache) > RAW_FALLBACK_DEDUPE_MAX_ENTRIES:
            self._cache.pop(next(iter(self._cache)))
        return receipt
