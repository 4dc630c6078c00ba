"""Parsing the model's flush answer into a proposal (docs/UPSTREAM.md#provider-output).

The answer is untrusted text. A proposal either carries markdown to append, or is an
explicit no-op; anything else raises ``ValueError`` so the service can send exactly one
repair prompt and then fall back to the raw archive.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from typing import Any

from .dates import DATE_RE, SOURCE_DATE_RE, granularity_for, normalize_candidate_date
from .normalize import SOURCE_ANCHOR_RE

logger = logging.getLogger(__name__)

MAX_MARKDOWN_CHARS = 12_000
MAX_RENDER_TEXT_CHARS = 2_000

CANDIDATE_KINDS = ("fact", "event", "preference", "decision", "procedure", "todo", "goal")
_SECTION_TITLES = {
    "fact": "Facts",
    "event": "Events",
    "preference": "Preferences",
    "decision": "Decisions",
    "procedure": "Procedures",
    "todo": "Todos",
    "goal": "Goals",
}
_KIND_ALIASES = {
    "activity": "event",
    "artifact": "fact",
    "creative work": "fact",
    "creative_work": "fact",
    "history": "fact",
    "memory": "fact",
    "milestone": "event",
    "personal history": "fact",
    "personal-history": "fact",
    "personal_history": "fact",
    "plan": "goal",
    "recommendation": "procedure",
    "recommendations": "procedure",
    "suggestion": "procedure",
    "suggestions": "procedure",
}
# Replies that mean "I obeyed the transcript" rather than "here is memory".
_TRIVIAL_ACKS = frozenset(
    {
        "ack",
        "acknowledged",
        "done",
        "got it",
        "ok",
        "okay",
        "ready",
        "thanks",
        "thank you",
        "understood",
        "yes",
    }
)
_BARE_TOKEN_RE = re.compile(r"\[?[A-Z][A-Z0-9_ -]{1,78}\]?")
_COMMENT_TOKEN_RE = re.compile(r"^[A-Za-z0-9._:+-]+$")
_LABELED_ANCHOR_RE = re.compile(
    r"(?i)\b(?:dia_id|dialogue_id|message_id|turn_id|anchor)\s*[:=]\s*(?P<anchor>[A-Za-z0-9._:+-]+)"
)
_SLUG_DROP_RE = re.compile(r"[^a-z0-9]+")
_SAVED_RE = re.compile(
    r"^Saved to (?P<path>\S+) \((?P<chunks>\d+) chunks indexed"
    r"(?:; integrity=(?P<integrity>[a-z_]+))?\)\.$"
)


@dataclass(frozen=True)
class FlushCandidate:
    """One atomic memory the model proposed (or the obligation scan found)."""

    id: str
    kind: str
    render_text: str
    source_message: int
    source_date: str
    confidence: float
    subject: str | None = None
    predicate: str | None = None
    value: str | None = None
    date: str | None = None
    date_basis: str | None = None
    granularity: str | None = None
    source_anchor: str | None = None
    origin: str = "llm"


@dataclass(frozen=True)
class FlushProposal:
    """The side-effect-free result of extraction; empty ``markdown`` means no-op."""

    markdown: str
    slug: str | None = None
    facts: tuple[str, ...] = ()
    procedures: tuple[str, ...] = ()
    decisions: tuple[str, ...] = ()
    candidates: tuple[FlushCandidate, ...] = ()
    invalid_candidate_errors: tuple[str, ...] = ()
    noop_reason: str | None = None


@dataclass(frozen=True)
class MemorySaveOutcome:
    path: str
    chunk_count: int
    integrity_status: str = "unverified"


def collapse_ws(value: Any) -> str:
    return " ".join(str(value or "").split())


def optional_text(value: Any, *, max_len: int = 512) -> str | None:
    text = collapse_ws(value)
    return text[:max_len] if text else None


def sanitize_slug(raw: str | None) -> str:
    cleaned = _SLUG_DROP_RE.sub("-", (raw or "").strip().lower()).strip("-")
    return cleaned[:40].strip("-")


def normalize_source_anchor(value: Any) -> str | None:
    """Accept a clean anchor, or dig one out of ``dia_id: D1:3``-style prose."""
    anchor = optional_text(value, max_len=128)
    if not anchor:
        return None
    if SOURCE_ANCHOR_RE.fullmatch(anchor):
        return anchor
    labeled = _LABELED_ANCHOR_RE.search(anchor)
    if labeled:
        return labeled.group("anchor")[:128]
    # Otherwise prefer the token that looks like an id (D1:3, msg.42) over plain words.
    tokens = re.findall(r"[A-Za-z0-9._:+-]+", anchor)
    anchor_like = [token for token in tokens if ":" in token or "." in token]
    if anchor_like:
        return anchor_like[-1][:128]
    if len(tokens) == 1:
        return tokens[0][:128]
    raise ValueError("candidate source_anchor contains unsupported characters")


def stable_candidate_id(
    *, kind: str, source_date: str, source_message: int, source_anchor: str | None, text: str
) -> str:
    material = "|".join(
        (
            kind.strip().lower(),
            source_date.strip().lower(),
            str(source_message),
            (source_anchor or "").strip().lower(),
            collapse_ws(text),
        )
    )
    return hashlib.sha256(material.encode("utf-8")).hexdigest()[:24]


def _as_int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _as_float(value: Any) -> float:
    try:
        return float(value or 0.0)
    except (TypeError, ValueError):
        return 0.0


def parse_candidate(payload: Any) -> FlushCandidate:
    """Validate one candidate object; raises ``ValueError`` with a short reason."""
    if not isinstance(payload, dict):
        raise ValueError("candidate must be a JSON object")
    kind = collapse_ws(payload.get("kind")).lower()
    kind = _KIND_ALIASES.get(kind, kind)
    if kind not in CANDIDATE_KINDS:
        if not kind:
            raise ValueError("candidate kind is required")
        # An unfamiliar label still carries a real memory; keep it rather than drop it.
        kind = "fact"
    render_text = collapse_ws(payload.get("render_text"))
    if not render_text:
        raise ValueError("candidate render_text is required")
    source_message = _as_int(payload.get("source_message"))
    if source_message <= 0:
        raise ValueError("candidate source_message must be a positive integer")
    source_date = collapse_ws(payload.get("source_date"))
    if not SOURCE_DATE_RE.fullmatch(source_date):
        raise ValueError("candidate source_date must be YYYY-MM-DD")
    source_anchor = normalize_source_anchor(payload.get("source_anchor"))
    granularity = optional_text(payload.get("granularity"), max_len=32)
    if granularity not in {None, "day", "month", "year"}:
        granularity = None
    date, granularity, date_basis = normalize_candidate_date(
        payload.get("date"),
        source_date=source_date,
        granularity=granularity,
        date_basis=optional_text(payload.get("date_basis"), max_len=128),
    )
    # Unparseable dates come back as None and are simply omitted, not treated as errors.
    if date and DATE_RE.fullmatch(date) is None:
        raise ValueError("candidate date must be YYYY, YYYY-MM, or YYYY-MM-DD")
    if date and granularity is None:
        granularity = granularity_for(date)
    confidence = _as_float(payload.get("confidence", 0.0))
    if not 0.0 <= confidence <= 1.0:
        raise ValueError("candidate confidence must be between 0 and 1")
    candidate_id = optional_text(payload.get("id"), max_len=128) or stable_candidate_id(
        kind=kind,
        source_date=source_date,
        source_message=source_message,
        source_anchor=source_anchor,
        text=render_text,
    )
    return FlushCandidate(
        id=candidate_id,
        kind=kind,
        render_text=render_text[:MAX_RENDER_TEXT_CHARS],
        source_message=source_message,
        source_date=source_date,
        confidence=confidence,
        subject=optional_text(payload.get("subject")),
        predicate=optional_text(payload.get("predicate")),
        value=optional_text(payload.get("value")),
        date=date,
        date_basis=date_basis,
        granularity=granularity,
        source_anchor=source_anchor,
    )


def parse_candidates(value: Any) -> tuple[tuple[FlushCandidate, ...], tuple[str, ...]]:
    """Parse every candidate; errors are collected as ``candidate[i]: ...``, not raised."""
    if value is None:
        return (), ()
    if not isinstance(value, list | tuple):
        return (), ("candidates must be a JSON array",)
    parsed: list[FlushCandidate] = []
    errors: list[str] = []
    for index, item in enumerate(value, start=1):
        try:
            parsed.append(parse_candidate(item))
        except ValueError as exc:
            errors.append(f"candidate[{index}]: {exc}")
    return tuple(parsed), tuple(errors)


def candidate_visible_text(candidate: FlushCandidate) -> str:
    text = collapse_ws(candidate.render_text)
    if candidate.date and candidate.date not in text:
        text = f"{text} ({candidate.date})"
    return text


def candidate_source_comment(candidate: FlushCandidate) -> str:
    parts = [f"date={candidate.source_date}", f"message={candidate.source_message}"]
    if candidate.source_anchor:
        parts.append(f"anchor={candidate.source_anchor}")
    return "<!-- opensquilla-source: " + " ".join(parts) + " -->"


def _event_comment(candidate: FlushCandidate) -> str:
    parts: list[str] = []
    if candidate.date:
        parts.append(f"event_date={candidate.date}")
    # date_basis is model text; only token-shaped values may go inside an HTML comment.
    if candidate.date_basis and _COMMENT_TOKEN_RE.fullmatch(candidate.date_basis):
        parts.append(f"date_basis={candidate.date_basis}")
    if candidate.granularity:
        parts.append(f"granularity={candidate.granularity}")
    return "<!-- opensquilla-event: " + " ".join(parts) + " -->" if parts else ""


def candidate_bullet(candidate: FlushCandidate) -> str:
    parts = [f"- {candidate_visible_text(candidate)}", candidate_source_comment(candidate)]
    event = _event_comment(candidate)
    if event:
        parts.append(event)
    return " ".join(parts)


def render_candidates(candidates: tuple[FlushCandidate, ...]) -> str:
    sections: list[str] = []
    for kind in CANDIDATE_KINDS:
        bullets = [candidate_bullet(c) for c in candidates if c.kind == kind]
        if bullets:
            sections.append(f"## {_SECTION_TITLES[kind]}\n" + "\n".join(bullets))
    return "\n\n".join(sections).strip()


def _legacy_items(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    raw_items = value if isinstance(value, list | tuple) else [value]
    return tuple(str(item).strip()[:2_000] for item in raw_items if str(item).strip())


def _render_legacy(
    facts: tuple[str, ...], procedures: tuple[str, ...], decisions: tuple[str, ...]
) -> str:
    sections = [
        f"## {title}\n" + "\n".join(f"- {item}" for item in items)
        for title, items in (("Facts", facts), ("Procedures", procedures), ("Decisions", decisions))
        if items
    ]
    return "\n\n".join(sections).strip()


def is_trivial_ack(text: str) -> bool:
    """True for empty text, "ok"-style replies and a bare upper-case token like READY."""
    stripped = text.strip()
    if not stripped:
        return True
    if re.sub(r"[.!?\s]+", " ", stripped).strip().lower() in _TRIVIAL_ACKS:
        return True
    return (
        len(stripped) <= 80
        and "\n" not in stripped
        and _BARE_TOKEN_RE.fullmatch(stripped) is not None
    )


def parse_flush_proposal(text: str) -> FlushProposal:
    """Parse a model answer; raises ``ValueError`` when it is not usable memory."""
    stripped = (text or "").strip()
    if not stripped:
        raise ValueError("empty flush proposal")
    # Greedy first-{ to last-}: tolerates prose or code fences around the JSON object.
    match = re.search(r"\{.*\}", stripped, re.S)
    try:
        payload = json.loads(match.group(0) if match else stripped)
    except json.JSONDecodeError as exc:
        logger.warning("session_flush.invalid_proposal_json", extra={"error": str(exc)})
        # Broken JSON must go to the repair prompt, never be saved as "markdown".
        if stripped.startswith("{") or "```json" in stripped[:200].lower():
            raise ValueError("invalid flush proposal JSON") from exc
        if is_trivial_ack(stripped):
            raise ValueError("flush proposal markdown is required") from exc
        return FlushProposal(markdown=stripped[:MAX_MARKDOWN_CHARS])
    if not isinstance(payload, dict):
        raise ValueError("flush proposal must be a JSON object")

    facts = _legacy_items(payload.get("facts"))
    procedures = _legacy_items(payload.get("procedures"))
    decisions = _legacy_items(payload.get("decisions"))
    candidates, errors = parse_candidates(payload.get("candidates"))
    markdown = str(payload.get("markdown") or payload.get("content") or "").strip()
    slug = str(payload.get("slug") or "").strip() or None
    noop_reason = optional_text(payload.get("noop_reason") or payload.get("no_memory_reason"))
    # Candidates win over model-written markdown: their rendering is what coverage checks.
    if candidates:
        markdown = render_candidates(candidates)
    elif not markdown and (facts or procedures or decisions):
        markdown = _render_legacy(facts, procedures, decisions)
    fields: dict[str, Any] = {
        "slug": slug,
        "facts": facts,
        "procedures": procedures,
        "decisions": decisions,
        "candidates": candidates,
        "invalid_candidate_errors": errors,
    }
    if markdown:
        return FlushProposal(
            markdown=markdown[:MAX_MARKDOWN_CHARS], noop_reason=noop_reason, **fields
        )
    # A no-op must be explicit and clean; invalid candidates mean "tried and failed".
    explicit_noop = noop_reason is not None or "candidates" in payload
    if explicit_noop and not errors and not (facts or procedures or decisions):
        return FlushProposal(
            markdown="",
            noop_reason=noop_reason or "No stable long-term memory was found.",
            **fields,
        )
    raise ValueError("flush proposal markdown is required")


def parse_memory_save_result(text: str) -> MemorySaveOutcome | None:
    """Parse ``Saved to <path> (<n> chunks indexed[; integrity=<x>]).``; None if malformed."""
    match = _SAVED_RE.match((text or "").strip())
    if match is None:
        return None
    return MemorySaveOutcome(
        path=match.group("path"),
        chunk_count=_as_int(match.group("chunks")),
        integrity_status=match.group("integrity") or "unverified",
    )
