"""Parsing the model's answer into a flush proposal (docs/UPSTREAM.md#provider-output)."""

from __future__ import annotations

import hashlib
import json

import pytest

from receipts_app.flush import Message
from receipts_app.flush.coverage import candidate_payload, markdown_with_obligations
from receipts_app.flush.parsing import (
    MAX_MARKDOWN_CHARS,
    FlushProposal,
    parse_flush_proposal,
    parse_memory_save_result,
    sanitize_slug,
)


def _candidate(**overrides: object) -> dict[str, object]:
    base: dict[str, object] = {
        "kind": "fact",
        "render_text": "Alice lives in Paris",
        "source_message": 1,
        "source_date": "2026-05-29",
        "confidence": 0.9,
    }
    base.update(overrides)
    return base


def _parse(payload: object) -> FlushProposal:
    return parse_flush_proposal(json.dumps(payload))


def test_candidates_render_grouped_by_kind_in_fixed_order() -> None:
    proposal = _parse(
        {
            "slug": "Trip Plans!",
            "candidates": [
                _candidate(kind="goal", render_text="Run a marathon"),
                _candidate(kind="fact", render_text="Alice lives in Paris", source_anchor="D1:3"),
                _candidate(kind="event", render_text="Alice moved", date="2025-03-01"),
            ],
        }
    )

    assert proposal.slug == "Trip Plans!"
    assert proposal.markdown == (
        "## Facts\n"
        "- Alice lives in Paris <!-- opensquilla-source: date=2026-05-29 message=1 "
        "anchor=D1:3 -->\n\n"
        "## Events\n"
        "- Alice moved (2025-03-01) <!-- opensquilla-source: date=2026-05-29 message=1 -->"
        " <!-- opensquilla-event: event_date=2025-03-01 granularity=day -->\n\n"
        "## Goals\n"
        "- Run a marathon <!-- opensquilla-source: date=2026-05-29 message=1 -->"
    )


def test_json_is_found_inside_prose_and_code_fences() -> None:
    text = 'Sure! ```json\n{"candidates": [' + json.dumps(_candidate()) + "]}\n```"

    proposal = parse_flush_proposal(text)

    assert len(proposal.candidates) == 1


def test_default_candidate_id_is_a_stable_hash() -> None:
    proposal = _parse({"candidates": [_candidate(source_anchor="D1:3")]})

    material = "fact|2026-05-29|1|d1:3|Alice lives in Paris"
    assert proposal.candidates[0].id == hashlib.sha256(material.encode()).hexdigest()[:24]


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"kind": ""}, "kind is required"),
        ({"render_text": "  "}, "render_text is required"),
        ({"source_message": 0}, "source_message must be a positive integer"),
        ({"source_date": "29/05/2026"}, "source_date must be YYYY-MM-DD"),
        ({"confidence": 1.5}, "confidence must be between 0 and 1"),
    ],
)
def test_invalid_candidates_are_collected_not_fatal(overrides: dict, error: str) -> None:
    proposal = _parse({"candidates": [_candidate(**overrides), _candidate(render_text="Valid")]})

    assert [c.render_text for c in proposal.candidates] == ["Valid"]
    assert len(proposal.invalid_candidate_errors) == 1
    assert proposal.invalid_candidate_errors[0].startswith("candidate[1]: ")
    assert error in proposal.invalid_candidate_errors[0]


def test_kind_aliases_and_unknown_kinds() -> None:
    proposal = _parse(
        {
            "candidates": [
                _candidate(kind="plan"),
                _candidate(kind="Milestone"),
                _candidate(kind="x"),
            ]
        }
    )

    assert [c.kind for c in proposal.candidates] == ["goal", "event", "fact"]


@pytest.mark.parametrize(
    ("date", "resolved", "basis"),
    [
        ("yesterday", "2026-05-28", "relative:yesterday"),
        ("last month", "2026-04", "relative:last_month"),
        ("last year", "2025", "relative:last_year"),
        ("3 days ago", "2026-05-26", "relative:3_days_ago"),
        # 2026-05-29 is a Friday: "last friday" is a week back, never the same day.
        ("last friday", "2026-05-22", "relative:last_friday"),
        ("May 2024", "2024-05", None),
        ("2024-7", "2024-07", None),
    ],
)
def test_relative_dates_resolve_against_the_source_date(
    date: str, resolved: str, basis: str | None
) -> None:
    proposal = _parse({"candidates": [_candidate(date=date)]})

    candidate = proposal.candidates[0]
    assert candidate.date == resolved
    assert candidate.date_basis == basis


def test_legacy_markdown_and_content_keys() -> None:
    assert _parse({"markdown": "## Notes\n- a"}).markdown == "## Notes\n- a"
    assert _parse({"content": "- b"}).markdown == "- b"


def test_legacy_fact_lists_render_as_sections() -> None:
    proposal = _parse({"facts": ["a", "b"], "decisions": "ship it", "procedures": []})

    assert proposal.markdown == "## Facts\n- a\n- b\n\n## Decisions\n- ship it"


def test_explicit_noop_forms() -> None:
    assert _parse({"candidates": [], "noop_reason": "chit-chat"}).noop_reason == "chit-chat"
    assert _parse({"no_memory_reason": "nothing"}).noop_reason == "nothing"
    default = _parse({"candidates": []})
    assert default.markdown == ""
    assert default.noop_reason == "No stable long-term memory was found."


@pytest.mark.parametrize(
    "payload",
    [
        {},
        {"slug": "x"},
        {"candidates": [{"kind": ""}]},
    ],
)
def test_payloads_without_memory_or_noop_raise(payload: dict) -> None:
    with pytest.raises(ValueError, match="markdown is required"):
        _parse(payload)


@pytest.mark.parametrize(
    "text", ["", "   ", "ok", "Done.", "thanks!", "READY", "[SILENT_REPLY_TOKEN]"]
)
def test_trivial_acknowledgements_are_rejected(text: str) -> None:
    with pytest.raises(ValueError):
        parse_flush_proposal(text)


@pytest.mark.parametrize("text", ['{"candidates": [', '```json\n{"slug": }\n```'])
def test_broken_json_is_rejected_not_saved_as_markdown(text: str) -> None:
    with pytest.raises(ValueError, match="invalid flush proposal JSON"):
        parse_flush_proposal(text)


def test_non_object_json_is_rejected() -> None:
    with pytest.raises(ValueError, match="must be a JSON object"):
        parse_flush_proposal("[1, 2, 3]")


def test_plain_prose_is_accepted_as_legacy_markdown() -> None:
    proposal = parse_flush_proposal("The user prefers tea over coffee.")

    assert proposal.markdown == "The user prefers tea over coffee."
    assert proposal.candidates == ()


def test_markdown_is_capped_at_12000_characters() -> None:
    proposal = _parse({"markdown": "x" * 20_000})

    assert len(proposal.markdown) == MAX_MARKDOWN_CHARS


@pytest.mark.parametrize(
    ("raw", "slug"),
    [("Trip Plans!", "trip-plans"), ("  ", ""), ("Ça va / OK", "a-va-ok"), ("a" * 60, "a" * 40)],
)
def test_sanitize_slug(raw: str, slug: str) -> None:
    assert sanitize_slug(raw) == slug


def test_memory_save_result_parsing() -> None:
    ok = parse_memory_save_result(
        "Saved to memory/2026-05-29-x.md (3 chunks indexed; integrity=ok)."
    )
    legacy = parse_memory_save_result("Saved to memory/a.md (2 chunks indexed).")

    assert ok is not None and (ok.path, ok.chunk_count, ok.integrity_status) == (
        "memory/2026-05-29-x.md",
        3,
        "ok",
    )
    assert legacy is not None and legacy.integrity_status == "unverified"
    assert parse_memory_save_result("saved somewhere") is None


def test_missing_obligations_are_backfilled_under_source_events() -> None:
    messages = [
        Message(
            role="user",
            content="[opensquilla-message: date=2026-05-29 message=1 anchor=D1:3]\n"
            "Alice: I went hiking yesterday",
        )
    ]
    proposal = _parse({"candidates": [_candidate(render_text="Alice likes tea", source_message=2)]})

    markdown, payload = markdown_with_obligations(proposal, messages)

    assert '## Source Events\n- Alice said: "I went hiking yesterday" (2026-05-28)' in markdown
    assert payload["obligation_count"] == 1
    assert payload["obligation_backfilled_count"] == 1
    assert payload["obligation_status"] == "backfilled"
    assert payload["obligation_missing_ids"] == []


def test_assistant_lines_never_create_obligations() -> None:
    messages = [
        Message(
            role="assistant",
            content="[opensquilla-message: date=2026-05-29 message=1 anchor=a1]\nBob: yesterday",
        )
    ]

    markdown, payload = markdown_with_obligations(FlushProposal(markdown="- x"), messages)

    assert markdown == "- x"
    assert payload["obligation_count"] == 0
    assert payload["obligation_status"] == "unverifiable"


def test_candidate_coverage_flags_invalid_candidates() -> None:
    proposal = _parse({"candidates": [_candidate(), _candidate(confidence=7)]})

    payload = candidate_payload(proposal, content=proposal.markdown)

    assert payload["candidate_count"] == 1
    assert payload["candidate_missing_ids"] == []
    assert payload["invalid_candidate_count"] == 1
    assert payload["output_coverage_status"] == "coverage_warning"
