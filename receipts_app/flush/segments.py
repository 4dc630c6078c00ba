"""Merging per-segment flush receipts into one (docs/UPSTREAM.md#flush-outcomes-and-ledger-rows).

A segmented flush writes one note per segment; the merged receipt must stay strictly
safe only if every segment was, so counts are summed and statuses take the worst value.
"""

from __future__ import annotations

import hashlib
from typing import Any

from .coverage import merge_integrity
from .normalize import FlushSegment
from .types import FLUSH_OBLIGATION_POLICY_VERSION, FlushReceipt

_SUMMARY_FIELDS = (
    "flushed_paths",
    "integrity_status",
    "indexed_chunk_count",
    "result_status",
    "content_hash",
    "candidate_count",
    "candidate_covered_count",
    "candidate_missing_ids",
    "candidate_source_coverage",
    "prompt_message_source_coverage",
    "output_coverage_status",
    "invalid_candidate_count",
    "invalid_candidate_errors",
    "obligation_count",
    "obligation_covered_count",
    "obligation_missing_ids",
    "obligation_coverage",
    "obligation_backfilled_count",
    "obligation_status",
    "obligation_policy_version",
    "input_message_count",
    "prompt_message_count",
    "prompt_char_count",
    "truncated",
    "truncation_policy",
    "first_included_message",
    "last_included_message",
    "source_coverage",
)


def segment_summary(index: int, receipt: FlushReceipt, **overrides: Any) -> dict[str, Any]:
    summary = {"index": index, **{name: getattr(receipt, name) for name in _SUMMARY_FIELDS}}
    summary.update(overrides)
    return summary


def _merge_output_status(summaries: list[dict[str, Any]]) -> str:
    statuses = [str(s.get("output_coverage_status") or "unverifiable") for s in summaries]
    if not statuses or sum(int(s.get("candidate_count") or 0) for s in summaries) <= 0:
        return "unverifiable"
    if "coverage_warning" in statuses:
        return "coverage_warning"
    return "ok" if all(status == "ok" for status in statuses) else "unverifiable"


def _merge_obligation_status(summaries: list[dict[str, Any]]) -> str:
    statuses = [str(s.get("obligation_status") or "unverifiable") for s in summaries]
    if not statuses or sum(int(s.get("obligation_count") or 0) for s in summaries) <= 0:
        return "unverifiable"
    for status in ("coverage_warning", "backfilled"):
        if status in statuses:
            return status
    return "ok" if all(status == "ok" for status in statuses) else "unverifiable"


def _weighted(summaries: list[dict[str, Any]], value: str, weight: str) -> float:
    total = sum(int(s.get(weight) or 0) for s in summaries)
    if total <= 0:
        return 0.0
    return round(
        sum(float(s.get(value) or 0) * int(s.get(weight) or 0) for s in summaries) / total, 6
    )


def merge_segment_receipts(
    parts: list[tuple[FlushSegment, FlushReceipt]],
    *,
    input_message_count: int,
    selected_start_index: int | None,
    segment_mode: str,
    segment_max_chars: int,
) -> FlushReceipt:
    summaries: list[dict[str, Any]] = []
    covered: set[int] = set()
    paths: list[str] = []
    policies: list[str] = []
    for index, (segment, receipt) in enumerate(parts, start=1):
        # A segment cut for size reports why; otherwise the apply step's policy stands.
        policy = segment.truncation_policy if segment.truncated else receipt.truncation_policy
        summaries.append(
            segment_summary(
                index,
                receipt,
                truncated=segment.truncated or receipt.truncated,
                truncation_policy=policy,
            )
        )
        # A set, because overlapping segments repeat messages that must count once.
        covered.update(range(segment.first_message, segment.last_message + 1))
        paths.extend(receipt.flushed_paths)
        if policy and policy != "full":
            policies.append(policy)

    start = selected_start_index or 1
    prompt_count = len(covered)
    total_inputs = input_message_count or prompt_count
    hashes = [str(s.get("content_hash") or "") for s in summaries]
    candidate_count = sum(int(s["candidate_count"]) for s in summaries)
    obligation_count = sum(int(s["obligation_count"]) for s in summaries)
    obligation_covered = sum(int(s["obligation_covered_count"]) for s in summaries)
    all_noop = bool(summaries) and all(s["result_status"] == "ok_noop_no_memory" for s in summaries)
    prompt_chars = sum(int(s["prompt_char_count"]) for s in summaries)
    first_slug = next((receipt.slug for _, receipt in parts if receipt.slug), None)
    return FlushReceipt(
        mode="llm",
        flushed_paths=sorted(set(paths)),
        slug=first_slug,
        message_count=prompt_count,
        duration_ms=0,
        raw_reason=None,
        error=None,
        result_status="ok_noop_no_memory" if all_noop and not paths else "ok_candidates_written",
        input_message_count=total_inputs,
        prompt_message_count=prompt_count,
        prompt_char_count=prompt_chars,
        truncated=any(s["truncated"] for s in summaries),
        truncation_policy=(
            ";".join(sorted(set(policies)))
            if policies
            else f"segmented:{segment_mode};segment_max_chars={segment_max_chars}"
        ),
        first_included_message=start + min(covered) - 1 if covered else None,
        last_included_message=start + max(covered) - 1 if covered else None,
        source_coverage=round(prompt_count / total_inputs, 6) if total_inputs else 0.0,
        segment_mode=segment_mode,
        segment_count=len(parts),
        segments=summaries,
        total_prompt_char_count=prompt_chars,
        # One status per written file: no-op segments have no file and do not vote.
        integrity_status=merge_integrity(
            [str(s["integrity_status"]) for s in summaries for _ in s["flushed_paths"]]
        ),
        indexed_chunk_count=sum(int(s["indexed_chunk_count"]) for s in summaries),
        candidate_count=candidate_count,
        candidate_covered_count=sum(int(s["candidate_covered_count"]) for s in summaries),
        candidate_missing_ids=[str(i) for s in summaries for i in s["candidate_missing_ids"]],
        candidate_source_coverage=_weighted(
            summaries, "candidate_source_coverage", "candidate_count"
        ),
        prompt_message_source_coverage=_weighted(
            summaries, "prompt_message_source_coverage", "prompt_message_count"
        ),
        output_coverage_status=_merge_output_status(summaries),  # type: ignore[arg-type]
        invalid_candidate_count=sum(int(s["invalid_candidate_count"]) for s in summaries),
        invalid_candidate_errors=[str(e) for s in summaries for e in s["invalid_candidate_errors"]],
        obligation_count=obligation_count,
        obligation_covered_count=obligation_covered,
        obligation_missing_ids=[str(i) for s in summaries for i in s["obligation_missing_ids"]],
        obligation_coverage=round(obligation_covered / obligation_count, 6)
        if obligation_count
        else 0.0,
        obligation_backfilled_count=sum(int(s["obligation_backfilled_count"]) for s in summaries),
        obligation_status=_merge_obligation_status(summaries),  # type: ignore[arg-type]
        obligation_policy_version=FLUSH_OBLIGATION_POLICY_VERSION,
        # 6.6: a segmented run hashes the segment hashes joined with "|".
        content_hash=(
            hashlib.sha256("|".join(hashes).encode("utf-8")).hexdigest() if any(hashes) else None
        ),
    )
