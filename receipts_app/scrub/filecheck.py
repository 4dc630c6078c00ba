"""Check one checkpoint file: the standard library only, so a reader process can run it.

Everything here reads and nothing writes. It imports neither Django nor this project: the
scrub's reader processes (``readers``) run this module, and only this module, by name
(``serve``). Each of them starts in a few milliseconds and needs no settings or database.

A file is whole when it exists, its bytes hash to what the receipt records (sha256, the
writer's ``content_hash``), and it parses as checkpoint JSONL whose events carry the receipt's
coverage. That means one session key and turn id (the receipt's), sequences 1..n, and one event
per covered transcript entry besides the tool-call events (``coverage_entry_count``).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
import queue
import stat as stat_module
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, NamedTuple

# Outcomes (CheckpointVerification.outcome); ``verify`` maps the unsafe ones to ledger statuses.
OK = "ok"
MISSING = "missing"  # no file where the receipt says (or no path recorded)
HASH_MISMATCH_OUTCOME = "hash_mismatch"  # the bytes are not the ones the receipt records
UNREADABLE = "unreadable"  # the file cannot be read, or is not checkpoint JSONL
COVERAGE_MISMATCH = "coverage_mismatch"  # its events do not carry the receipt's coverage
NO_WORKSPACE = "no_workspace"  # this process has no checkpoint workspace to look in
OUTCOMES = (OK, MISSING, HASH_MISMATCH_OUTCOME, UNREADABLE, COVERAGE_MISMATCH, NO_WORKSPACE)
CHUNK = 1024 * 1024

# Called with the bytes just read (the throttle's hook); the default waits for nothing.
OnRead = Callable[[int], None]


class Found(NamedTuple):
    """What a check found, in the field order of ``verify.Verification``."""

    outcome: str
    detail: str = ""
    size: int | None = None
    mtime_ns: int | None = None
    bytes_read: int = 0
    digest: str = ""  # sha256 of the bytes read
    parsed: bool = False  # the events were parsed and carry the coverage


class Wanted(NamedTuple):
    """What a check needs to know of the receipt: where its file is and what it records."""

    source_path: str | None
    content_hash: str | None
    session_key: str
    turn_id: str | None
    coverage_entry_count: int | None
    parsed_hash: str = ""  # bytes with this sha256 were parsed before and were whole


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


def _events(text: str) -> list[Any] | str:
    """The JSON value of each line of ``text`` (which ends in a newline), or why a line is not
    JSON. The lines are parsed as one JSON array first: one call into the parser instead of
    one a line (about 90 µs against 150 for a 40-line checkpoint). A newline cannot stand
    inside a JSON value, so each line is one element exactly when the array has as many
    elements as there are lines; otherwise the lines are parsed one by one, to say which."""
    lines = text.count("\n")
    try:
        events = json.loads("[" + text[:-1].replace("\n", ",") + "]")
    except json.JSONDecodeError:
        events = None
    if isinstance(events, list) and len(events) == lines:
        return events
    parsed = []
    for number, line in enumerate(text.split("\n")[:-1], start=1):
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError as exc:
            return f"line {number} is not JSON: {exc.msg}"
    return parsed


def coverage_problem(
    body: bytes, session_key: str, turn_id: str | None, coverage_entry_count: int | None
) -> str | None:
    """Why ``body`` is not the checkpoint JSONL of this coverage; None when it is."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8 at byte {exc.start}"
    if not text.endswith("\n"):
        return "the last line has no newline (cut short?)"
    events = _events(text)
    if isinstance(events, str):
        return events
    entries = 0
    keys: set[tuple[Any, Any]] = set()
    for number, event in enumerate(events, start=1):
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
    found_key, found_turn = next(iter(keys))
    if found_key != session_key:
        return f"events of session {found_key!r}, the receipt's is {session_key!r}"
    if turn_id and found_turn != turn_id:
        return f"events of turn {found_turn!r}, the receipt's is {turn_id!r}"
    if coverage_entry_count is not None and entries != coverage_entry_count:
        return f"{entries} transcript entries, the receipt covers {coverage_entry_count}"
    return None


def check_file(wanted: Wanted, root: Path | None, *, on_read: OnRead | None = None) -> Found:
    """Read ``wanted``'s file under ``root`` in full and say what it is.

    ``wanted.parsed_hash``: bytes with this sha256 were parsed before and carried the
    coverage, so the same bytes are hashed and not parsed again.
    """
    opened = _open_checked(wanted, root)
    if isinstance(opened, Found):
        return opened
    return _read_checked(wanted, *opened, on_read)


def check_files(wanted: list[Wanted], root: Path | None) -> list[Found]:
    """``check_file`` of each, at full speed: every file is opened and the kernel asked to read
    it (``POSIX_FADV_WILLNEED``) before the first is read. A cold checkpoint is a small file of
    its own, so its read is mostly waiting for the disk; asked for together, the disk serves
    them at once, and a read then finds its bytes in memory. Measured on a cold set of 10,000:
    about 2.5 times the rate of one file after another, at less CPU
    (docs/PERFORMANCE.md#checkpoint-scrub)."""
    opened: list[tuple[int, os.stat_result] | Found] = []
    done = 0  # ``opened[:done]`` were handed on (``_read_checked`` closes what it is given)
    try:
        for one in wanted:
            handle = _open_checked(one, root)
            opened.append(handle)
            if not isinstance(handle, Found):
                _ask_ahead(handle[0])
        found = []
        for one, handle in zip(wanted, opened, strict=True):
            done += 1
            found.append(handle if isinstance(handle, Found) else _read_checked(one, *handle, None))
        return found
    finally:
        for handle in opened[done:]:  # what an exception left open
            if not isinstance(handle, Found):
                os.close(handle[0])


_WILLNEED = getattr(os, "POSIX_FADV_WILLNEED", None)


def _ask_ahead(fd: int) -> None:
    if _WILLNEED is not None:
        try:
            os.posix_fadvise(fd, 0, 0, _WILLNEED)
        except OSError:
            pass  # only a hint: the read still reads


def _open_checked(wanted: Wanted, root: Path | None) -> tuple[int, os.stat_result] | Found:
    """The open descriptor and stat of ``wanted``'s file, or what was found instead."""
    if root is None:
        return Found(NO_WORKSPACE, "no checkpoint workspace is configured here")
    source_path = wanted.source_path
    if not source_path:
        return Found(MISSING, "the receipt records no file")
    try:
        return _open_inside(root, source_path)
    except _Escapes as exc:
        return Found(UNREADABLE, str(exc))
    except _NotAFile as exc:
        return Found(
            UNREADABLE, f"{source_path} is not a file", exc.info.st_size, exc.info.st_mtime_ns
        )
    except FileNotFoundError:
        return Found(MISSING, f"no file at {source_path}")
    except OSError as exc:
        return Found(UNREADABLE, f"{source_path}: {exc.strerror or exc}")


def _read_checked(wanted: Wanted, fd: int, info: os.stat_result, on_read: OnRead | None) -> Found:
    """Read the open ``fd`` of ``wanted``'s file (and close it) and say what it holds."""
    source_path = wanted.source_path
    mtime_ns = info.st_mtime_ns
    try:
        digest, size, body = _read_fd(fd, info.st_size, on_read)
    except OSError as exc:
        return Found(UNREADABLE, f"{source_path}: {exc.strerror or exc}", info.st_size, mtime_ns)
    finally:
        os.close(fd)
    recorded = wanted.content_hash or ""
    if recorded and digest != recorded:
        detail = (
            f"{source_path}: {size} bytes hash to {digest[:16]}…, "
            f"the receipt records {recorded[:16]}…"
        )
        return Found(HASH_MISMATCH_OUTCOME, detail, size, mtime_ns, size, digest)
    if wanted.parsed_hash and wanted.parsed_hash == digest:
        return Found(OK, "", size, mtime_ns, size, digest, True)  # a full cycle's common case
    problem = coverage_problem(
        body, wanted.session_key, wanted.turn_id, wanted.coverage_entry_count
    )
    if problem is not None:
        coverage = problem.startswith(("events of", "no events")) or "transcript entries" in problem
        outcome = COVERAGE_MISMATCH if coverage else UNREADABLE
        return Found(outcome, f"{source_path}: {problem}", size, mtime_ns, size, digest)
    return Found(OK, "", size, mtime_ns, size, digest, True)


# ---- The reader process's side (``readers`` is the scrub's side) -----------------------------
#
# One JSON document a line each way. In: ``[tag, [[Wanted fields…], …]]``; out: ``[tag,
# [[Found fields…], …]]`` in the same order, or ``[tag, null, "why"]`` when the request could
# not be served. A reader serves one request at a time: ``check_files`` already has the disk
# serve a request's files at once, and threads would only contend for the interpreter.


def _answer(root: Path, line: str) -> list[Any]:
    try:
        tag, files = json.loads(line)
    except (ValueError, TypeError) as exc:
        return [-1, None, f"not a request: {exc}"]
    try:
        return [tag, check_files([Wanted(*values) for values in files], root)]
    except Exception as exc:  # noqa: BLE001 - answered: the scrub reads this chunk itself
        return [tag, None, f"{type(exc).__name__}: {exc}"]


def serve(root: str, requests: IO[str] | None = None, answers: IO[str] | None = None) -> None:
    """Answer requests from ``requests`` (stdin) on ``answers`` (stdout) until end of input."""
    requests = requests if requests is not None else sys.stdin
    answers = answers if answers is not None else sys.stdout
    workspace = Path(root)
    # Requests are taken off the pipe as they come, while one is being served: the scrub
    # writes a batch's requests at once, and a full pipe would hold it up until this reader
    # got round to reading the next line.
    waiting: queue.SimpleQueue[str | None] = queue.SimpleQueue()

    def take() -> None:
        for line in requests:
            waiting.put(line)
        waiting.put(None)

    threading.Thread(target=take, name="requests", daemon=True).start()
    while (line := waiting.get()) is not None:
        if line.strip():
            try:
                answers.write(json.dumps(_answer(workspace, line), separators=(",", ":")) + "\n")
                answers.flush()
            except BrokenPipeError:
                return  # the scrub is gone (its worker killed): nobody to answer
