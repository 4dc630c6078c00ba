"""The LLM half of a flush: extract a proposal, then save it through one ``memory_save``.

Extraction is pure (no side effects); the save is the only write, and it goes through
the read-only guard so the model cannot pick the target file.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from .calls import (
    FlushRun,
    ToolHandler,
    audit_fields,
    make_flush_read_only_handler,
    provider_complete,
)
from .coverage import (
    candidate_payload,
    integrity_with_coverage,
    markdown_with_obligations,
    prompt_source_coverage,
)
from .normalize import DEFAULT_SEGMENT_MAX_CHARS, FlushSegment, build_segments
from .parsing import FlushProposal, parse_flush_proposal, parse_memory_save_result, sanitize_slug
from .prompts import flush_prompt, repair_prompt
from .segments import merge_segment_receipts, segment_summary
from .types import (
    FlushReceipt,
    Message,
    SegmentMode,
    ToolCall,
    ToolContext,
    current_tool_context,
)

FLUSH_MAX_TOKENS = 3072
SEGMENT_CONCURRENCY = 4


def plan_path(proposal: FlushProposal, *, index: int = 1, total: int = 1) -> str:
    """``memory/<UTC date>-<slug>.md``, with ``-partNNN`` when a run has several segments."""
    slug = sanitize_slug(proposal.slug) or "session-flush"
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    suffix = f"-part{index:03d}" if total > 1 else ""
    return f"memory/{today}-{slug}{suffix}.md"


async def extract_proposal(messages: list[Message], provider: Any) -> FlushProposal:
    """One extraction call, plus exactly one repair call if the answer is unusable."""
    prompt = [Message(role="user", content=flush_prompt(messages))]
    text = await provider_complete(provider, messages=prompt, max_tokens=FLUSH_MAX_TOKENS)
    try:
        return parse_flush_proposal(text)
    except ValueError as exc:
        repair = [Message(role="user", content=repair_prompt(broken_text=text, parse_error=exc))]
        repaired = await provider_complete(provider, messages=repair, max_tokens=FLUSH_MAX_TOKENS)
        # A second ValueError propagates: the service turns it into parse_failed_archived.
        return parse_flush_proposal(repaired)


async def apply_proposal(
    proposal: FlushProposal,
    *,
    tool_handler: ToolHandler,
    messages: list[Message],
    agent_id: str,
    input_message_count: int,
    selected_start_index: int | None,
    path: str,
) -> FlushReceipt:
    """Save ``proposal`` with one guarded ``memory_save`` call, or record a no-op.

    Raises ``RuntimeError`` when the tool reports an error (so the service files
    ``apply_failed_archived``) and ``ValueError`` for an empty proposal with no
    ``noop_reason``.
    """
    started = time.monotonic()
    # Obligations are added before the save so the note on disk is what coverage measured.
    content, obligations = markdown_with_obligations(proposal, messages)
    common: dict[str, Any] = {
        "mode": "llm",
        "slug": sanitize_slug(proposal.slug) or "session-flush",
        "message_count": len(messages),
        "raw_reason": None,
        "error": None,
        "prompt_message_source_coverage": prompt_source_coverage(messages),
        **obligations,
        **audit_fields(
            prompt_message_count=len(messages),
            prompt_char_count=len(flush_prompt(messages)),
            first=1 if messages else None,
            last=len(messages) if messages else None,
            input_message_count=input_message_count or len(messages),
            selected_start_index=selected_start_index,
        ),
    }
    if not content.strip():
        if not proposal.noop_reason:
            raise ValueError("empty flush proposal content")
        return FlushReceipt(
            flushed_paths=[],
            duration_ms=int((time.monotonic() - started) * 1000),
            result_status="ok_noop_no_memory",
            **candidate_payload(proposal, content=""),
            **common,
        )

    handler = make_flush_read_only_handler(tool_handler, relative_path=path)
    token = current_tool_context.set(ToolContext(agent_id=agent_id))
    try:
        result = await handler(
            ToolCall(
                tool_use_id=f"flush-pure-{int(time.time())}",
                tool_name="memory_save",
                arguments={"path": path, "content": content, "mode": "append"},
            )
        )
    finally:
        current_tool_context.reset(token)
    if getattr(result, "is_error", False):
        raise RuntimeError(getattr(result, "content", None) or "memory_save failed")
    # An unparseable reply still wrote something, so it is recorded, but never as safe.
    saved = parse_memory_save_result(str(getattr(result, "content", None) or result))
    coverage = candidate_payload(proposal, content=content)
    if (
        coverage["output_coverage_status"] == "unverifiable"
        and coverage["invalid_candidate_count"] == 0
        and obligations["obligation_count"] > 0
        and not obligations["obligation_missing_ids"]
    ):
        # Legacy markdown that kept every obligation is as good as full coverage.
        coverage["output_coverage_status"] = "ok"
    save_status = saved.integrity_status if saved else "malformed_result"
    return FlushReceipt(
        flushed_paths=[saved.path if saved else path],
        duration_ms=int((time.monotonic() - started) * 1000),
        result_status="ok_candidates_written",
        integrity_status=integrity_with_coverage(save_status, coverage["output_coverage_status"]),
        indexed_chunk_count=saved.chunk_count if saved else 0,
        content_hash=hashlib.sha256(content.encode("utf-8")).hexdigest(),
        **coverage,
        **common,
    )


async def llm_flush(
    messages: list[Message],
    provider: Any,
    run: FlushRun,
    *,
    tool_handler: ToolHandler,
    flush_max_chars: int | None,
    segment_mode: SegmentMode,
    segment_max_chars: int | None,
    segment_overlap_messages: int,
) -> FlushReceipt:
    started = time.monotonic()
    if segment_mode != "off":
        budget = segment_max_chars or min(
            flush_max_chars or DEFAULT_SEGMENT_MAX_CHARS, DEFAULT_SEGMENT_MAX_CHARS
        )
        segments = build_segments(
            messages, segment_max_chars=budget, overlap_messages=segment_overlap_messages
        )
        if segment_mode == "always" or len(segments) > 1:
            return await _segmented_flush(
                segments,
                provider,
                run,
                tool_handler=tool_handler,
                segment_mode=segment_mode,
                budget=budget,
            )
    proposal = await extract_proposal(messages, provider)
    receipt = await apply_proposal(
        proposal,
        tool_handler=tool_handler,
        messages=messages,
        agent_id=run.agent_id,
        input_message_count=run.input_message_count,
        selected_start_index=run.selected_start_index,
        path=plan_path(proposal),
    )
    return replace(
        receipt,
        duration_ms=int((time.monotonic() - started) * 1000),
        segment_mode=segment_mode,
        segment_count=1,
        segments=[segment_summary(1, receipt)],
        total_prompt_char_count=receipt.prompt_char_count,
    )


async def _segmented_flush(
    segments: list[FlushSegment],
    provider: Any,
    run: FlushRun,
    *,
    tool_handler: ToolHandler,
    segment_mode: SegmentMode,
    budget: int,
) -> FlushReceipt:
    started = time.monotonic()
    gate = asyncio.Semaphore(SEGMENT_CONCURRENCY)

    async def extract(segment: FlushSegment) -> FlushProposal:
        async with gate:
            return await extract_proposal(segment.messages, provider)

    proposals = await asyncio.gather(*(extract(segment) for segment in segments))
    start = run.selected_start_index or 1
    parts: list[tuple[FlushSegment, FlushReceipt]] = []
    # Saved in order; a later failure leaves earlier parts on disk, as upstream does.
    for index, (segment, proposal) in enumerate(zip(segments, proposals, strict=True), 1):
        receipt = await apply_proposal(
            proposal,
            tool_handler=tool_handler,
            messages=segment.messages,
            agent_id=run.agent_id,
            input_message_count=run.input_message_count,
            selected_start_index=start + segment.first_message - 1,
            path=plan_path(proposal, index=index, total=len(segments)),
        )
        parts.append((segment, receipt))
    merged = merge_segment_receipts(
        parts,
        input_message_count=run.input_message_count,
        selected_start_index=run.selected_start_index,
        segment_mode=segment_mode,
        segment_max_chars=budget,
    )
    return replace(merged, duration_ms=int((time.monotonic() - started) * 1000))
