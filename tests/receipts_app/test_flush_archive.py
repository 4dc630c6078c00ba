"""The raw-fallback archive: content, path safety, idempotent writes, re-parsing (6.8, 8.4)."""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from receipts_app.flush import Message, parse_raw_fallback_entries, write_raw_fallback_archive
from receipts_app.flush.archive import (
    dump_transcript_excerpt,
    raw_archive_header,
    raw_fallback_header_reason,
    raw_fallback_relative_path,
    safe96,
)

NOW = datetime(2026, 5, 29, 12, 0, tzinfo=UTC)

# agent:main:webchat:s1-0 from the golden OpenSquilla 0.3.0 sessions.db; the reference
# implementation archived it as ...-preimage-10a731ff2e20b9f0.md with this sha256.
GOLDEN_S1_0 = [
    ("user", "[2026-11-29T16:00+00:00 Sun UTC]\nDeploy receipt tuesday meeting tuesday."),
    (
        "assistant",
        "Paris receipt tuesday memory 日本語 🚀 memory meeting deploy birthday receipt invoice "
        "memory memory memory report memory 日本語 paris 🚀 memory budget birthday meeting "
        "tuesday report birthday grüße.",
    ),
    (
        "user",
        "[2026-11-29T16:00+00:00 Sun UTC]\nMeeting rollback memory 🚀 report receipt weather "
        "rollback receipt invoice.",
    ),
    (
        "assistant",
        "Budget 🚀 budget paris rollback rollback tuesday budget 日本語 checkpoint tuesday "
        "birthday 日本語 🚀 weather grüße report grüße flush meeting budget receipt weather "
        "budget 日本語.",
    ),
    ("user", "[2026-11-29T16:00+00:00 Sun UTC]\nTuesday checkpoint rollback."),
    (
        "assistant",
        "日本語 weather weather budget birthday memory paris report report birthday 日本語 "
        "budget grüße grüße meeting deploy report memory 日本語 budget agent budget.",
    ),
    (
        "user",
        "[2026-11-29T16:00+00:00 Sun UTC]\n🚀 checkpoint tuesday grüße report paris budget 🚀 "
        "tuesday.",
    ),
    (
        "assistant",
        "Grüße memory report report invoice meeting memory birthday weather report weather "
        "flush report deploy checkpoint flush.",
    ),
]
GOLDEN_S1_0_SHA = "10a731ff2e20b9f0f0a9d20db6ab83c834909b7b76ecf44a0201fabefa0e3c03"


def _archive_content(messages: list[Message], reason: str = "preimage") -> str:
    return raw_archive_header(reason) + dump_transcript_excerpt(messages, max_chars=800_000).text


def test_golden_transcript_archives_to_the_reference_bytes(tmp_path: Path) -> None:
    messages = [Message(role=role, content=content) for role, content in GOLDEN_S1_0]
    content = _archive_content(messages)

    result = write_raw_fallback_archive(
        tmp_path, content=content, reason="preimage", session_key="agent:main:webchat:s1-0", now=NOW
    )

    assert result.content_hash == GOLDEN_S1_0_SHA
    assert result.relative_path == (
        "memory/.raw_fallbacks/2026-05-29-agent-main-webchat-s1-0-preimage-10a731ff2e20b9f0.md"
    )
    assert (tmp_path / result.relative_path).read_bytes() == content.encode("utf-8")
    assert result.byte_count == len(content.encode("utf-8"))


def test_header_and_one_line_per_message() -> None:
    content = _archive_content(
        [Message(role="user", content="hi"), Message(role="assistant", content="hello")],
        reason="no_provider",
    )

    assert content == "# Raw flush (no_provider)\n\nuser: hi\nassistant: hello"


def test_each_message_is_cut_to_500_characters_prefix_included() -> None:
    prefix = "[opensquilla-message: date=2026-05-29 message=1 anchor=m1]\n"
    long_text = prefix + "x" * 1000

    excerpt = dump_transcript_excerpt([Message(role="user", content=long_text)], max_chars=None)

    assert excerpt.text == "user: " + long_text[:500]
    assert excerpt.text.count("x") == 500 - len(prefix)


def test_messages_without_text_are_skipped_but_still_counted() -> None:
    messages = [
        Message(role="user", content="question"),
        Message(role="assistant", content=""),
        Message(role="assistant", content="answer"),
    ]

    excerpt = dump_transcript_excerpt(messages, max_chars=None)

    assert excerpt.text == "user: question\nassistant: answer"
    assert excerpt.input_message_count == 3
    assert excerpt.prompt_message_count == 2


def test_cap_keeps_the_newest_messages_in_chronological_order() -> None:
    messages = [Message(role="user", content=f"m{i}") for i in range(1, 6)]
    # Each line is "user: mN" = 8 characters; 20 characters fit two lines, not three.

    excerpt = dump_transcript_excerpt(messages, max_chars=20)

    assert excerpt.text == "user: m4\nuser: m5"
    assert (excerpt.first_included_message, excerpt.last_included_message) == (4, 5)
    assert excerpt.truncated is True
    assert excerpt.truncation_policy == "tail_excerpt_max_chars=20"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("agent:main:webchat:s1", "agent-main-webchat-s1"),
        ("agent:Ops:discord:group:1", "agent-Ops-discord-group-1"),
        ("webchat:default", "webchat-default"),
        ("../../etc/passwd", "etc-passwd"),
        ("/abs/path", "abs-path"),
        ("a\x00b", "a-b"),
        ("..", "unknown"),
        ("..-", "unknown"),
        ("", "unknown"),
        (None, "unknown"),
        ("x" * 200, "x" * 96),
    ],
)
def test_safe96(value: str | None, expected: str) -> None:
    assert safe96(value) == expected


def test_relative_path_rejects_a_non_sha256_hash() -> None:
    with pytest.raises(ValueError, match="SHA-256"):
        raw_fallback_relative_path(reason="preimage", session_key="k", content_hash="abc")


@pytest.mark.parametrize(
    "session_key",
    ["../../outside", "/etc/passwd", "a/../../b", "nul\x00byte", "..\\..\\win", "..", ""],
)
def test_hostile_session_keys_stay_inside_the_archive_directory(
    tmp_path: Path, session_key: str
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()

    result = write_raw_fallback_archive(
        workspace,
        content="# Raw flush (preimage)\n\nuser: x",
        reason="pre/../image",
        session_key=session_key,
    )

    target = (workspace / result.relative_path).resolve()
    assert target.parent == (workspace / "memory" / ".raw_fallbacks").resolve()
    assert target.is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["ws"]


def test_symlinked_archive_directory_outside_the_workspace_is_refused(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    outside = tmp_path / "outside"
    (workspace / "memory").mkdir(parents=True)
    outside.mkdir()
    os.symlink(outside, workspace / "memory" / ".raw_fallbacks")

    with pytest.raises(ValueError, match="escapes the workspace"):
        write_raw_fallback_archive(workspace, content="data", reason="preimage", session_key="k")

    assert list(outside.iterdir()) == []


def test_same_content_is_not_rewritten(tmp_path: Path) -> None:
    first = write_raw_fallback_archive(tmp_path, content="same", reason="timeout", session_key="k")
    target = tmp_path / first.relative_path
    os.utime(target, (1_000_000, 1_000_000))

    second = write_raw_fallback_archive(tmp_path, content="same", reason="timeout", session_key="k")

    assert second == first
    assert target.stat().st_mtime == 1_000_000
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]


def test_a_corrupted_file_with_the_same_name_is_repaired(tmp_path: Path) -> None:
    first = write_raw_fallback_archive(tmp_path, content="good", reason="timeout", session_key="k")
    target = tmp_path / first.relative_path
    target.write_text("tampered", encoding="utf-8")

    write_raw_fallback_archive(tmp_path, content="good", reason="timeout", session_key="k")

    assert target.read_text(encoding="utf-8") == "good"
    assert hashlib.sha256(target.read_bytes()).hexdigest() == first.content_hash


def test_different_content_gets_a_different_file(tmp_path: Path) -> None:
    one = write_raw_fallback_archive(tmp_path, content="one", reason="timeout", session_key="k")
    two = write_raw_fallback_archive(tmp_path, content="two", reason="timeout", session_key="k")

    assert one.relative_path != two.relative_path
    assert (tmp_path / one.relative_path).read_text(encoding="utf-8") == "one"


def test_unwritable_workspace_raises_and_leaves_no_temp_files(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "ws"
    not_a_dir.write_text("I am a file", encoding="utf-8")

    with pytest.raises(OSError):
        write_raw_fallback_archive(not_a_dir, content="x", reason="preimage", session_key="k")

    assert [p.name for p in tmp_path.iterdir()] == ["ws"]


def test_parse_entries_round_trips_an_archive() -> None:
    messages = [
        Message(role="user", content="[2026-11-29T16:00+00:00 Sun UTC]\nDeploy on tuesday."),
        Message(role="assistant", content="Noted."),
        Message(role="user", content="second\n\nwith a blank line"),
    ]

    parsed = parse_raw_fallback_entries(_archive_content(messages))

    assert [(m.role, m.content) for m in parsed] == [
        ("user", "[2026-11-29T16:00+00:00 Sun UTC]\nDeploy on tuesday."),
        ("assistant", "Noted."),
        ("user", "second\nwith a blank line"),
    ]


def test_parse_entries_skips_headers_comments_and_empty_messages() -> None:
    content = (
        "# Raw flush (timeout)\n"
        "<!-- written by hand -->\n"
        "stray text before any message\n"
        "system: be brief\n"
        "user:\n"
        "assistant:   \n"
        "user:no space after colon\n"
    )

    parsed = parse_raw_fallback_entries(content)

    assert [(m.role, m.content) for m in parsed] == [
        ("system", "be brief"),
        ("user", "no space after colon"),
    ]


def test_header_reason() -> None:
    assert raw_fallback_header_reason("# Raw flush (llm_error)\n\nuser: x") == "llm_error"
    assert raw_fallback_header_reason("user: x") is None
