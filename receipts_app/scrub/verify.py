"""Verify one checkpoint receipt's file. Reads only: the scrub never writes into a workspace.

A file is whole when it exists, its bytes hash (sha256, the writer's ``content_hash``) to what
the receipt records, and it parses as checkpoint JSONL whose events carry the receipt's
coverage: one session key and turn id (the receipt's), sequences 1..n, and one event per
covered transcript entry besides the tool-call events (``coverage_entry_count``).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
import stat as stat_module
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from django.conf import settings

from sessions_app.gateways import served_gateway

from ..models import MemoryDurableReceipt
from ..statuses import CHECKPOINT_MISSING, HASH_MISMATCH

# Outcomes (CheckpointVerification.outcome). Each unsafe one maps to a ledger status below.
OK = "ok"
MISSING = "missing"  # no file where the receipt says (or no path recorded)
HASH_MISMATCH_OUTCOME = "hash_mismatch"  # the bytes are not the ones the receipt records
UNREADABLE = "unreadable"  # the file cannot be read, or is not checkpoint JSONL
COVERAGE_MISMATCH = "coverage_mismatch"  # its events do not carry the receipt's coverage
NO_WORKSPACE = "no_workspace"  # this process has no checkpoint workspace to look in
OUTCOMES = (OK, MISSING, HASH_MISMATCH_OUTCOME, UNREADABLE, COVERAGE_MISMATCH, NO_WORKSPACE)
# The ledger status each unsafe outcome means: upstream's ``hash_mismatch`` for any damage,
# this product's ``checkpoint_missing`` for a file that is gone. ``no_workspace`` says nothing
# about the file, so it moves nothing.
STATUS_FOR_OUTCOME = {
    MISSING: CHECKPOINT_MISSING,
    HASH_MISMATCH_OUTCOME: HASH_MISMATCH,
    UNREADABLE: HASH_MISMATCH,
    COVERAGE_MISMATCH: HASH_MISMATCH,
}
# The receipt's reason for each unsafe outcome: one text per outcome, so the failure groups
# group them (the file and the numbers are in ``detail``, kept with the verification and the
# receipt's ``scrub`` event).
REASON_FOR_OUTCOME = {
    MISSING: "scrub: checkpoint_missing: no checkpoint file where the receipt says",
    HASH_MISMATCH_OUTCOME: "scrub: hash_mismatch: the file's bytes are not the ones the receipt records",
    UNREADABLE: "scrub: hash_mismatch: the file cannot be read as checkpoint JSONL",
    COVERAGE_MISMATCH: "scrub: hash_mismatch: the file's events do not carry the receipt's coverage",
}
CHUNK = 1024 * 1024

# Called with the bytes just read (the throttle's hook); the default waits for nothing.
OnRead = Callable[[int], None]


@dataclass(frozen=True)
class Verification:
    outcome: str
    detail: str = ""
    size: int | None = None
    mtime_ns: int | None = None
    bytes_read: int = 0
    digest: str = ""  # sha256 of the bytes read
    parsed: bool = False  # the events were parsed and carry the coverage

    @property
    def whole(self) -> bool:
        return self.outcome == OK

    @property
    def reason(self) -> str:
        """The receipt's reason when this outcome moves it."""
        return REASON_FOR_OUTCOME.get(self.outcome, self.detail)

    @property
    def status(self) -> str | None:
        """The at-risk status this outcome puts a saved checkpoint in; None when it is safe
        (or nothing could be said)."""
        return STATUS_FOR_OUTCOME.get(self.outcome)

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "detail": self.detail,
            "size": self.size,
            "bytes_read": self.bytes_read,
            "status": self.status,
        }


def checkpoint_root() -> Path | None:
    """Where this process finds its gateway's checkpoint files: the workspace its checkpoints
    and retakes write to (``OPENSQUILLA_CHECKPOINT_WORKSPACE``)."""
    configured = getattr(settings, "OPENSQUILLA_CHECKPOINT_WORKSPACE", None)
    return Path(configured).expanduser() if configured else None


@functools.lru_cache(maxsize=8)
def resolved_root(root: Path) -> Path:
    return root.resolve()


# Where the kernel says what an open descriptor really is (Linux): the containment check reads
# the path of the file actually opened, one call, instead of resolving each component of the
# path in Python first (what a cold full read spent most of its per-file time on).
_FD_PATHS = "/proc/self/fd"
_HAS_FD_PATHS = os.path.isdir(_FD_PATHS)
# O_NONBLOCK: a file swapped for a FIFO between the stat and the open must not hang a reader
# (it reads as nothing, a mismatch); it changes nothing for a regular file.
_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_NONBLOCK", 0)
)
# Reading a file must not write to the workspace's disk either: without O_NOATIME a read of a
# file whose atime is a day old (relatime, every full cycle) writes its inode back. The kernel
# allows it to the file's owner only; a process that is not (EPERM) reads without it.
_NOATIME = getattr(os, "O_NOATIME", 0)
_noatime = {"flags": _OPEN_FLAGS | _NOATIME}


def _inside(root: str, real: str) -> bool:
    return real == root or real.startswith(root if root.endswith(os.sep) else root + os.sep)


class _Escapes(ValueError):
    """The file (symlinks followed) is not inside the workspace."""


class _NotAFile(Exception):
    def __init__(self, info: os.stat_result) -> None:
        super().__init__("not a regular file")
        self.info = info


def _open_inside(root: Path, source_path: str) -> tuple[int, os.stat_result]:
    """Open ``source_path`` under ``root`` for reading; the descriptor and its stat.

    ``_Escapes`` when the file (symlinks followed) is not inside the workspace, ``_NotAFile``
    when it is no regular file, ``OSError`` as ``os`` raises it (``FileNotFoundError``: no
    file). Only a regular file is opened (a stat, following symlinks, comes first), so a FIFO
    or a device under the workspace is never opened."""
    base = str(resolved_root(root))
    # ``os.path.join`` semantics (an absolute source_path stands alone), without its cost.
    path = source_path if os.path.isabs(source_path) else f"{base}{os.sep}{source_path}"
    if not _HAS_FD_PATHS and not _inside(base, os.path.realpath(path)):
        raise _Escapes(f"checkpoint path escapes the workspace: {source_path}")
    try:
        info = os.stat(path)
    except FileNotFoundError:
        # Gone, or a symlink that leads out to nothing: say which, as the writer would.
        if not _inside(base, os.path.realpath(path)):
            raise _Escapes(f"checkpoint path escapes the workspace: {source_path}") from None
        raise
    if not stat_module.S_ISREG(info.st_mode):
        if not _inside(base, os.path.realpath(path)):
            raise _Escapes(f"checkpoint path escapes the workspace: {source_path}")
        raise _NotAFile(info)
    try:
        fd = os.open(path, _noatime["flags"])
    except PermissionError as exc:
        if exc.errno != errno.EPERM or _noatime["flags"] == _OPEN_FLAGS:
            raise  # EACCES: the file cannot be read at all
        _noatime["flags"] = _OPEN_FLAGS  # not the owner: plain reads from now on
        fd = os.open(path, _OPEN_FLAGS)
    if _HAS_FD_PATHS:
        try:
            real = os.readlink(f"{_FD_PATHS}/{fd}")
        except OSError:
            real = os.path.realpath(path)
        if not _inside(base, real):
            os.close(fd)
            raise _Escapes(f"checkpoint path escapes the workspace: {source_path}")
    return fd, info


def _read_fd(fd: int, size_hint: int, on_read: OnRead | None) -> tuple[str, int, bytes]:
    """sha256 of everything ``fd`` holds, its length and the bytes. A file is read in reads of
    its own size and one byte more (up to ``CHUNK``): a checkpoint is one read, a short read
    being the end of a regular file, and no 1 MiB buffer is allocated and shrunk per file."""
    digest = hashlib.sha256()
    parts: list[bytes] = []
    total = 0
    want = min(CHUNK, max(size_hint, 0) + 1)
    while chunk := os.read(fd, want):
        digest.update(chunk)
        total += len(chunk)
        parts.append(chunk)
        if on_read is not None:
            on_read(len(chunk))
        if len(chunk) < want:
            break
        want = CHUNK
    return digest.hexdigest(), total, b"".join(parts)


def coverage_problem(body: bytes, receipt: Any) -> str | None:
    """Why ``body`` is not the checkpoint JSONL of ``receipt``'s coverage; None when it is."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8 at byte {exc.start}"
    if not text.endswith("\n"):
        return "the last line has no newline (cut short?)"
    entries = 0
    keys: set[tuple[Any, Any]] = set()
    for number, line in enumerate(text.split("\n")[:-1], start=1):
        try:
            event = json.loads(line)
        except json.JSONDecodeError as exc:
            return f"line {number} is not JSON: {exc.msg}"
        if not isinstance(event, dict) or "event_id" not in event or "role" not in event:
            return f"line {number} is not a checkpoint event"
        if event.get("sequence") != number:
            return f"line {number} has sequence {event.get('sequence')!r}"
        keys.add((event.get("session_key"), event.get("turn_id")))
        if event.get("role") != "tool_call":
            entries += 1
    if not keys:
        return "no events"
    if len(keys) != 1:
        return "events of more than one session key or turn"
    session_key, turn_id = next(iter(keys))
    if session_key != receipt.session_key:
        return f"events of session {session_key!r}, the receipt's is {receipt.session_key!r}"
    if receipt.turn_id and turn_id != receipt.turn_id:
        return f"events of turn {turn_id!r}, the receipt's is {receipt.turn_id!r}"
    expected = receipt.coverage_entry_count
    if expected is not None and entries != expected:
        return f"{entries} transcript entries, the receipt covers {expected}"
    return None


def verify_file(
    receipt: Any,
    root: Path | None,
    *,
    parsed_hash: str = "",
    on_read: OnRead | None = None,
    stat: os.stat_result | None = None,
) -> Verification:
    """Read ``receipt``'s file under ``root`` in full and say what it is.

    ``parsed_hash``: bytes with this sha256 were parsed before and carried the coverage, so
    the same bytes are hashed and not parsed again. ``stat``: the file's stat, when the caller
    has it.
    """
    if root is None:
        return Verification(NO_WORKSPACE, "no checkpoint workspace is configured here")
    if not receipt.source_path:
        return Verification(MISSING, "the receipt records no file")
    try:
        fd, info = _open_inside(root, receipt.source_path)
    except _Escapes as exc:
        return Verification(UNREADABLE, str(exc))
    except _NotAFile as exc:
        seen = Verification(UNREADABLE, size=exc.info.st_size, mtime_ns=exc.info.st_mtime_ns)
        return replace(seen, detail=f"{receipt.source_path} is not a file")
    except FileNotFoundError:
        return Verification(MISSING, f"no file at {receipt.source_path}")
    except OSError as exc:
        return Verification(UNREADABLE, f"{receipt.source_path}: {exc.strerror or exc}")
    if stat is not None:
        info = stat
    seen = Verification(OK, size=info.st_size, mtime_ns=info.st_mtime_ns)
    recorded = receipt.content_hash or ""
    try:
        digest, size, body = _read_fd(fd, info.st_size, on_read)
    except OSError as exc:
        detail = f"{receipt.source_path}: {exc.strerror or exc}"
        return replace(seen, outcome=UNREADABLE, detail=detail)
    finally:
        os.close(fd)
    read = replace(seen, size=size, bytes_read=size, digest=digest)
    if recorded and digest != recorded:
        return replace(
            read,
            outcome=HASH_MISMATCH_OUTCOME,
            detail=f"{receipt.source_path}: {size} bytes hash to {digest[:16]}…, "
            f"the receipt records {recorded[:16]}…",
        )
    if parsed_hash and parsed_hash == digest:
        # The common case of a full cycle: built directly (``replace`` costs more than the read).
        return Verification(OK, "", size, info.st_mtime_ns, size, digest, True)
    problem = coverage_problem(body, receipt)
    if problem is not None:
        coverage = problem.startswith(("events of", "no events")) or "transcript entries" in problem
        outcome = COVERAGE_MISMATCH if coverage else UNREADABLE
        return replace(read, outcome=outcome, detail=f"{receipt.source_path}: {problem}")
    return Verification(OK, "", size, info.st_mtime_ns, size, digest, True)


def verify_receipt(
    receipt: MemoryDurableReceipt, *, root: Path | None = None, on_read: OnRead | None = None
) -> Verification:
    """What the checkpoint file of ``receipt`` is now, read in full where this process keeps
    its gateway's files (``root``: default ``checkpoint_root()``). No writes anywhere.

    Without ``root``, only a process that serves the receipt's gateway has its files; any
    other answers ``no_workspace`` rather than look in the wrong workspace.
    """
    if root is None:
        if str(receipt.gateway_id) != served_gateway():
            return Verification(
                NO_WORKSPACE,
                f"the files of gateway {receipt.gateway_id} are on its own host; "
                f"this process serves gateway {served_gateway()}",
            )
        root = checkpoint_root()
    return verify_file(receipt, root, on_read=on_read)
