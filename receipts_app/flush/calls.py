"""Calling out: the provider, the guarded tool handler, and receipt field helpers."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .correlation import current_provider_request_correlation
from .prompts import safe_error_message
from .safety import validate_flush_save_arguments
from .types import (
    FlushResultStatus,
    Message,
    ProviderCompletionError,
    RawReason,
    ToolCall,
    ToolResult,
)

ToolHandler = Callable[[ToolCall], Awaitable[ToolResult] | ToolResult]


@dataclass
class FlushRun:
    """Identity of one ``execute`` call, shared by every exit path."""

    agent_id: str
    session_key: str
    turn_id: str
    source_path: str
    session_id: str | None = None
    checkpoint_exists: bool | None = None
    input_message_count: int = 0
    selected_start_index: int | None = None


async def resolved(value: Any) -> Any:
    """Await ``value`` if it is awaitable: resolvers and writers may be sync or async."""
    return await value if inspect.isawaitable(value) else value


def error_fields(exc: BaseException | None) -> dict[str, Any]:
    if exc is None:
        return {"raw_error_type": None, "raw_error_message": None, "raw_error_code": None}
    # Only provider errors carry a code; others (ValueError, TimeoutError) leave it empty.
    code = getattr(exc, "code", None)
    return {
        "raw_error_type": type(exc).__name__,
        "raw_error_message": safe_error_message(exc),
        "raw_error_code": str(code) if code else None,
    }


def raw_status(reason: RawReason) -> FlushResultStatus:
    if reason in {"no_provider", "no_tools", "preimage"}:
        return "ok_archive_only"
    return "provider_failed_archived" if reason == "timeout" else "parse_failed_archived"


def audit_fields(
    *,
    prompt_message_count: int,
    prompt_char_count: int,
    first: int | None,
    last: int | None,
    input_message_count: int,
    selected_start_index: int | None,
    truncated: bool = False,
    truncation_policy: str = "full",
) -> dict[str, Any]:
    """Receipt coverage fields; window-relative numbers become transcript-relative."""
    start = selected_start_index or 1
    return {
        "input_message_count": input_message_count,
        "prompt_message_count": prompt_message_count,
        "prompt_char_count": prompt_char_count,
        "truncated": truncated,
        "truncation_policy": truncation_policy,
        "first_included_message": start + first - 1 if first is not None else None,
        "last_included_message": start + last - 1 if last is not None else None,
        "source_coverage": (
            round(prompt_message_count / input_message_count, 6) if input_message_count else 0.0
        ),
    }


async def provider_complete(provider: Any, *, messages: list[Message], max_tokens: int) -> str:
    """Completion text from ``provider.complete(...)`` or a streaming ``provider.chat(...)``.

    Any provider-side exception becomes ``ProviderCompletionError``. A provider with
    neither method raises ``TypeError``, which the service files as a parse failure, as
    upstream does.
    """
    complete = getattr(provider, "complete", None)
    if callable(complete):
        try:
            response = await complete(messages=messages, max_tokens=max_tokens)
        # Re-raise as-is so the provider's own error code survives.
        except ProviderCompletionError:
            raise
        except Exception as exc:
            code = str(getattr(exc, "code", "") or "")
            raise ProviderCompletionError(str(exc), code=code) from exc
        # SDK responses use .content, some test doubles and wrappers use .text.
        return getattr(response, "content", None) or getattr(response, "text", "") or ""
    chat = getattr(provider, "chat", None)
    if not callable(chat):
        name = type(provider).__name__
        raise TypeError(f"Provider {name} supports neither complete() nor chat()")
    chunks: list[str] = []
    config: dict[str, Any] = {"max_tokens": max_tokens}
    correlation = current_provider_request_correlation()
    if correlation is not None:
        # Upstream's streaming providers read it from their chat config.
        config["provider_request_correlation"] = correlation
    stream = chat(messages, config=config)
    try:
        async for event in stream:
            kind = getattr(event, "kind", "")
            if kind == "error" or type(event).__name__ == "ErrorEvent":
                message = getattr(event, "message", "") or "provider error"
                raise ProviderCompletionError(message, code=str(getattr(event, "code", "") or ""))
            text = getattr(event, "text", "") or ""
            if text and (kind == "text_delta" or "Delta" in type(event).__name__):
                chunks.append(text)
    finally:
        # Close the stream even on an error event so the HTTP connection is released.
        aclose = getattr(stream, "aclose", None)
        if callable(aclose):
            await aclose()
    return "".join(chunks)


def make_flush_read_only_handler(
    inner: ToolHandler, *, relative_path: str
) -> Callable[[ToolCall], Awaitable[ToolResult]]:
    """Wrap ``inner`` so ``memory_save`` can only append to ``relative_path``.

    Curated files (MEMORY.md, USER.md, ...) and the archive directories are never
    writable from a flush, whatever the model asked for. Denials come back as an error
    ``ToolResult`` without calling ``inner``.
    """

    async def guarded(call: ToolCall) -> ToolResult:
        if call.tool_name == "memory_save":
            denial = validate_flush_save_arguments(call.arguments, relative_path=relative_path)
            if denial is not None:
                return ToolResult(
                    tool_use_id=call.tool_use_id,
                    tool_name=call.tool_name,
                    content=denial,
                    is_error=True,
                )
        result: ToolResult = await resolved(inner(call))
        return result

    return guarded
