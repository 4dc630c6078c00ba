"""The raw-fallback archive: what a degraded flush leaves on disk (docs/UPSTREAM.md#raw-fallback-archives).

The archive is the only copy of the transcript the repair worker can re-distil, so the
writer is crash-safe (temp file, fsync, atomic replace, directory fsync) and idempotent
(the file name carries the content hash).
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .types import Message

RAW_FALLBACK_DIR = "memory/.raw_fallbacks"
PER_MESSAGE_MAX_CHARS = 500
DEFAULT_RAW_ARCHIVE_MAX_CHARS = 800_000

_UNSAFE_RUN_RE = re.compile(r"[^A-Za-z0-9_.-]+")
_DOT_RUN_RE = re.compile(r"\.{2,}")
_SHA256_RE = re.compile(r"[0-9a-fA-F]{64}")
_ENTRY_LINE_RE = re.compile(r"^(user|assistant|system):\s?(.*)$")
_HEADER_RE = re.compile(r"^# Raw flush \(([^)]+)\)")


@dataclass(frozen=True)
class RawArchiveWriteResult:
    relative_path: str
    content_hash: str
    byte_count: int


@dataclass(frozen=True)
class TranscriptExcerpt:
    """A tail excerpt plus which messages made it in (1-based, within the input list)."""

    text: str
    input_message_count: int
    prompt_message_count: int
    truncated: bool
    truncation_policy: str
    first_included_message: int | None
    last_included_message: int | None
    source_coverage: float


def safe96(value: str | None) -> str:
    """Make one file-name component out of a session key or reason.

    Runs of characters outside ``[A-Za-z0-9_.-]`` become ``-``, runs of dots collapse to
    one (so ``..`` can never survive), ``.``/``-`` are stripped from both ends, and the
    result is capped at 96 characters. The cap is applied after the strip, as upstream
    does, so archive names stay byte-identical with OpenSquilla's.
    """
    text = _UNSAFE_RUN_RE.sub("-", str(value or "").strip()).strip("-")
    text = _DOT_RUN_RE.sub(".", text).strip(".-")
    if text in {"", ".", ".."}:
        return "unknown"
    return text[:96]


def raw_fallback_relative_path(
    *,
    reason: str,
    session_key: str | None,
    content_hash: str,
    now: datetime | None = None,
) -> str:
    if not _SHA256_RE.fullmatch(content_hash or ""):
        raise ValueError("content_hash must be a 64-character SHA-256 hex string")
    stamp = (now or datetime.now(UTC)).strftime("%Y-%m-%d")
    name = f"{stamp}-{safe96(session_key or 'unknown')}-{safe96(reason)}-{content_hash[:16]}"
    return f"{RAW_FALLBACK_DIR}/{name}.md"


def _message_line(message: Any, *, per_message_max_chars: int | None) -> str | None:
    """Render ``role: text``; messages without text produce no line at all."""
    role = getattr(message, "role", "?")
    content = getattr(message, "content", "")
    if not isinstance(content, str) or not content:
        return None
    text = content[:per_message_max_chars] if per_message_max_chars is not None else content
    return f"{role}: {text}"


def dump_transcript_excerpt(
    messages: list[Any],
    *,
    max_chars: int | None,
    per_message_max_chars: int | None = PER_MESSAGE_MAX_CHARS,
) -> TranscriptExcerpt:
    """Collect lines newest first until the cap, then emit them in chronological order.

    The cap counts line lengths only (not the joining newlines), matching upstream.
    """
    if max_chars is not None and max_chars < 0:
        raise ValueError("max_chars must be >= 0")
    lines: list[str] = []
    included: list[int] = []
    total = 0
    truncated = False
    for index in range(len(messages) - 1, -1, -1):
        line = _message_line(messages[index], per_message_max_chars=per_message_max_chars)
        if line is None:
            continue
        if max_chars is not None and total + len(line) > max_chars:
            truncated = True
            break
        total += len(line)
        lines.append(line)
        included.append(index + 1)
    # Collected newest first so the cap drops the oldest messages; emit chronologically.
    lines.reverse()
    included.reverse()
    count = len(messages)
    return TranscriptExcerpt(
        text="\n".join(lines),
        input_message_count=count,
        prompt_message_count=len(included),
        truncated=truncated,
        truncation_policy=f"tail_excerpt_max_chars={max_chars}" if truncated else "full",
        first_included_message=included[0] if included else None,
        last_included_message=included[-1] if included else None,
        source_coverage=round(len(included) / count, 6) if count else 0.0,
    )


def raw_archive_header(reason: str) -> str:
    return f"# Raw flush ({reason})\n\n"


def _fsync_directory(path: Path) -> None:
    # Best effort: some filesystems refuse to open or fsync a directory.
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_raw_fallback_archive(
    workspace: str | Path,
    *,
    content: str,
    reason: str,
    session_key: str | None = None,
    now: datetime | None = None,
) -> RawArchiveWriteResult:
    """Write ``content`` under ``<workspace>/memory/.raw_fallbacks/`` and return its identity.

    Raises ``ValueError`` when the target would resolve outside the workspace (for
    example through a symlinked directory) and ``OSError`` when it cannot be written.
    A file that already holds the same bytes is left untouched.
    """
    root = Path(workspace).expanduser().resolve()
    encoded = str(content or "").encode("utf-8")
    content_hash = hashlib.sha256(encoded).hexdigest()
    relative_path = raw_fallback_relative_path(
        reason=reason, session_key=session_key, content_hash=content_hash, now=now
    )
    target = (root / relative_path).resolve()
    if not target.is_relative_to(root):
        raise ValueError(f"raw fallback path escapes the workspace: {relative_path}")
    result = RawArchiveWriteResult(
        relative_path=relative_path, content_hash=content_hash, byte_count=len(encoded)
    )
    # The name embeds the hash, but the bytes are re-checked: a damaged file gets rewritten.
    if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == content_hash:
        return result

    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(encoded)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
        _fsync_directory(target.parent)
    except BaseException:
        # Never leave a half-written temp file next to real archives.
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise
    return result


def raw_fallback_header_reason(content: str) -> str | None:
    """The reason from a ``# Raw flush (<reason>)`` first line, if present."""
    first = content.lstrip().split("\n", 1)[0] if content else ""
    match = _HEADER_RE.match(first.strip())
    return match.group(1) if match else None


def parse_raw_fallback_entries(content: str) -> list[Message]:
    """Turn an archive back into messages for the repair flush (docs/UPSTREAM.md#repairing-one-row).

    A line starting ``user:``, ``assistant:`` or ``system:`` opens a message; following
    non-blank lines continue it. Headers and comments before the first message are
    skipped. Blank lines are dropped, so re-parsing is lossy in whitespace only.
    """
    entries: list[Message] = []
    role: str | None = None
    lines: list[str] = []

    def close_current() -> None:
        nonlocal role, lines
        body = "\n".join(line for line in lines if line).strip()
        if role and body:
            entries.append(Message(role=role, content=body))
        role, lines = None, []

    for raw_line in content.splitlines():
        text = raw_line.strip()
        if not text:
            continue
        match = _ENTRY_LINE_RE.match(text)
        if match is not None:
            close_current()
            role = match.group(1)
            lines = [match.group(2)] if match.group(2) else []
        elif role is not None:
            lines.append(text)
        # Anything before the first role line (the header, comments) is not transcript.
    close_current()
    return entries
