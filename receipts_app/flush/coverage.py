"""Did the written markdown keep what it had to keep? (docs/UPSTREAM.md#flush-outcomes-and-ledger-rows)

Two checks feed the strict-safety predicate:
- candidate coverage: every valid candidate's visible text is in the rendered markdown;
- obligations: user lines with a temporal cue and a stable anchor (a deterministic scan,
  not the model's opinion) are present, backfilled under ``## Source Events`` if the model
  left them out.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from .dates import SOURCE_DATE_RE, normalize_candidate_date
from .normalize import INLINE_SOURCE_ANCHOR_RE
from .parsing import (
    FlushCandidate,
    FlushProposal,
    candidate_bullet,
    candidate_source_comment,
    candidate_visible_text,
    collapse_ws,
    normalize_source_anchor,
    stable_candidate_id,
)
from .types import FLUSH_OBLIGATION_POLICY_VERSION, Message

OBLIGATION_LIMIT = 50

_PREFIX_RE = re.compile(r"^\[opensquilla-message:\s*(?P<meta>[^\]]+)\]\s*\n(?P<body>.*)\Z", re.S)
_DIALOGUE_LINE_RE = re.compile(
    r"^\s*(?P<speaker>[A-Za-z][^:\n]{0,80}):\s*(?P<utterance>.+?)\s*$", re.S
)
_MONTHS = (
    "jan|january|feb|february|mar|march|apr|april|may|jun|june|jul|july|"
    "aug|august|sep|sept|september|oct|october|nov|november|dec|december"
)
_TEMPORAL_CUE_RE = re.compile(
    r"(?i)\b("
    r"yesterday|tomorrow|last year|last month|next month|last week|past week|next week|"
    r"(?:one|two|three|four|five|six|seven|\d+) days ago|"
    r"last (?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)|"
    r"\d{4}-\d{1,2}-\d{1,2}|\d{4}-\d{1,2}|\d{4}|"
    rf"(?:{_MONTHS})\s+\d{{1,2}},?\s+\d{{4}}|"
    rf"\d{{1,2}}\s+(?:{_MONTHS}),?\s+\d{{4}}"
    r")\b"
)


def _split_prefix(content: str) -> tuple[dict[str, str], str] | None:
    match = _PREFIX_RE.match(content)
    if match is None:
        return None
    meta: dict[str, str] = {}
    for part in match.group("meta").split():
        key, sep, value = part.partition("=")
        if sep and key:
            meta[key] = value
    return meta, match.group("body").strip()


def _first_cue(text: str) -> str | None:
    match = _TEMPORAL_CUE_RE.search(text)
    return match.group(1) if match else None


def _obligation_from_message(content: str) -> FlushCandidate | None:
    parsed = _split_prefix(content)
    if parsed is None:
        return None
    meta, body = parsed
    source_date = meta.get("date") or ""
    try:
        source_message = int(meta.get("message") or 0)
    except ValueError:
        source_message = 0
    # Without a source date a relative cue ("yesterday") cannot be resolved, so no obligation.
    if not SOURCE_DATE_RE.fullmatch(source_date) or source_message <= 0:
        return None
    line = None if "\n" in body else _DIALOGUE_LINE_RE.match(body)
    inline_anchor: str | None = None
    if line is None:
        # Multi-line bodies: the first anchored speaker line with a time cue wins.
        for raw in body.splitlines():
            anchor_match = INLINE_SOURCE_ANCHOR_RE.search(raw)
            candidate_line = _DIALOGUE_LINE_RE.match(raw)
            if anchor_match and candidate_line and _first_cue(candidate_line.group("utterance")):
                line, inline_anchor = candidate_line, anchor_match.group("anchor")
                break
    if line is None:
        return None
    speaker = collapse_ws(line.group("speaker"))
    utterance = collapse_ws(INLINE_SOURCE_ANCHOR_RE.sub("", line.group("utterance")))
    cue = _first_cue(utterance) if speaker and utterance else None
    if not cue:
        return None
    date, granularity, basis = normalize_candidate_date(
        cue, source_date=source_date, granularity=None, date_basis=None
    )
    if not date:
        return None
    try:
        anchor = normalize_source_anchor(inline_anchor or meta.get("anchor"))
    except ValueError:
        # An anchor we cannot cite is not a checkable obligation; skip rather than fail.
        return None
    # Quoted verbatim: the backfill must not paraphrase what the user actually said.
    text = f'{speaker} said: "{utterance[:800]}"'
    return FlushCandidate(
        id=stable_candidate_id(
            kind="event",
            source_date=source_date,
            source_message=source_message,
            source_anchor=anchor,
            text=text,
        ),
        kind="event",
        render_text=text,
        source_message=source_message,
        source_date=source_date,
        confidence=0.85,
        date=date,
        date_basis=basis,
        granularity=granularity,
        source_anchor=anchor,
        origin="obligation",
    )


def extract_obligations(messages: list[Message]) -> tuple[FlushCandidate, ...]:
    """Anchored, dated user lines with a time cue; assistant text never creates one."""
    found: list[FlushCandidate] = []
    seen: set[tuple[str, int, str]] = set()
    for message in messages:
        if message.role != "user" or not isinstance(message.content, str):
            continue
        candidate = _obligation_from_message(message.content)
        if candidate is None or not candidate.source_anchor:
            continue
        key = (candidate.source_date, candidate.source_message, candidate.source_anchor)
        if key in seen:
            continue
        seen.add(key)
        found.append(replace(candidate, origin="obligation"))
        if len(found) >= OBLIGATION_LIMIT:
            break
    return tuple(found)


def _is_rendered(candidate: FlushCandidate, content: str) -> bool:
    # Any of text, source comment or anchor counts: models often reword but keep the cite.
    visible = collapse_ws(candidate_visible_text(candidate))
    if visible and visible in collapse_ws(content):
        return True
    if candidate_source_comment(candidate) in content:
        return True
    return bool(candidate.source_anchor and f"anchor={candidate.source_anchor}" in content)


def obligation_payload(
    obligations: tuple[FlushCandidate, ...], *, content: str, backfilled: int
) -> dict[str, Any]:
    base: dict[str, Any] = {
        "obligation_count": len(obligations),
        "obligation_backfilled_count": backfilled if obligations else 0,
        "obligation_policy_version": FLUSH_OBLIGATION_POLICY_VERSION,
    }
    if not obligations:
        return {
            **base,
            "obligation_covered_count": 0,
            "obligation_missing_ids": [],
            "obligation_coverage": 0.0,
            "obligation_status": "unverifiable",
        }
    missing = [c.id for c in obligations if not _is_rendered(c, content)]
    covered = len(obligations) - len(missing)
    status = "coverage_warning" if missing else ("backfilled" if backfilled else "ok")
    return {
        **base,
        "obligation_covered_count": covered,
        "obligation_missing_ids": missing,
        "obligation_coverage": round(covered / len(obligations), 6),
        "obligation_status": status,
    }


def markdown_with_obligations(
    proposal: FlushProposal, messages: list[Message]
) -> tuple[str, dict[str, Any]]:
    """Append missing obligations under ``## Source Events`` and report coverage."""
    obligations = extract_obligations(messages)
    markdown = proposal.markdown
    if not obligations:
        return markdown, obligation_payload((), content=markdown, backfilled=0)
    # A candidate citing the same source line already covers it, even if worded differently.
    existing = {(c.source_date, c.source_message, c.source_anchor) for c in proposal.candidates}
    backfill: list[FlushCandidate] = []
    for obligation in obligations:
        key = (obligation.source_date, obligation.source_message, obligation.source_anchor)
        if key in existing or _is_rendered(obligation, markdown):
            continue
        existing.add(key)
        backfill.append(obligation)
    if backfill:
        bullets = "\n".join(candidate_bullet(c) for c in backfill)
        markdown = f"{markdown.rstrip()}\n\n## Source Events\n{bullets}".strip()
    return markdown, obligation_payload(obligations, content=markdown, backfilled=len(backfill))


def candidate_payload(proposal: FlushProposal, *, content: str) -> dict[str, Any]:
    errors = list(proposal.invalid_candidate_errors)
    candidates = proposal.candidates
    if not candidates:
        return {
            "candidate_count": 0,
            "candidate_covered_count": 0,
            "candidate_missing_ids": [],
            "candidate_source_coverage": 0.0,
            "output_coverage_status": "unverifiable",
            "invalid_candidate_count": len(errors),
            "invalid_candidate_errors": errors,
        }
    # Whitespace-insensitive: the memory_save tool may re-wrap lines.
    normalized = collapse_ws(content)
    missing = [c.id for c in candidates if collapse_ws(candidate_visible_text(c)) not in normalized]
    sourced = sum(1 for c in candidates if c.source_date and c.source_message > 0)
    return {
        "candidate_count": len(candidates),
        "candidate_covered_count": len(candidates) - len(missing),
        "candidate_missing_ids": missing,
        "candidate_source_coverage": round(sourced / len(candidates), 6),
        "output_coverage_status": "ok" if not missing and not errors else "coverage_warning",
        "invalid_candidate_count": len(errors),
        "invalid_candidate_errors": errors,
    }


def prompt_source_coverage(messages: list[Message]) -> float:
    if not messages:
        return 0.0
    sourced = sum(
        1 for m in messages if isinstance(m.content, str) and "[opensquilla-message:" in m.content
    )
    return round(sourced / len(messages), 6)


def integrity_with_coverage(save_status: str, output_status: str) -> str:
    """A clean save still reads as unsafe when the output lost candidates."""
    if save_status not in {"ok", "unverified"}:
        return save_status
    if output_status == "ok":
        return save_status
    return "coverage_warning" if output_status == "coverage_warning" else "unverified"


def merge_integrity(statuses: list[str]) -> str:
    if not statuses:
        return "unverified"
    # Worst first: one missing file makes the whole segmented flush unsafe.
    if all(status == "ok" for status in statuses):
        return "ok"
    for worst in (
        "missing_file",
        "missing_chunks",
        "noncanonical_path",
        "malformed_result",
        "coverage_warning",
        "unverified",
    ):
        if worst in statuses:
            return worst
    return statuses[0]
