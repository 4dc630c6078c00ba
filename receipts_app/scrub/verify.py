"""Verify one checkpoint receipt's file. Reads only: the scrub never writes into a workspace.

A file is whole when it exists, its bytes hash (sha256, the writer's ``content_hash``) to what
the receipt records, and it parses as checkpoint JSONL whose events carry the receipt's
coverage: one session key and turn id (the receipt's), sequences 1..n, and one event per
covered transcript entry besides the tool-call events (``coverage_entry_count``).
"""

from __future__ import annotations

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


def checkpoint_file(root: Path, source_path: str) -> Path:
    """The receipt's file under ``root``; ``ValueError`` when the path leaves it (symlinks
    resolved, as the writer checks it)."""
    resolved = resolved_root(root)
    target = (resolved / source_path).resolve()
    if resolved != target and resolved not in target.parents:
        raise ValueError(f"checkpoint path escapes the workspace: {source_path}")
    return target


def _read(path: Path, on_read: OnRead | None, keep: bool) -> tuple[str, int, bytes]:
    digest = hashlib.sha256()
    parts: list[bytes] = []
    total = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            total += len(chunk)
            if keep:
                parts.append(chunk)
            if on_read is not None:
                on_read(len(chunk))
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
        path = checkpoint_file(root, receipt.source_path)
        info = stat or path.stat()
    except ValueError as exc:
        return Verification(UNREADABLE, str(exc))
    except FileNotFoundError:
        return Verification(MISSING, f"no file at {receipt.source_path}")
    except OSError as exc:
        return Verification(UNREADABLE, f"{receipt.source_path}: {exc.strerror or exc}")
    seen = Verification(OK, size=info.st_size, mtime_ns=info.st_mtime_ns)
    if not stat_module.S_ISREG(info.st_mode):
        return replace(seen, outcome=UNREADABLE, detail=f"{receipt.source_path} is not a file")
    recorded = receipt.content_hash or ""
    try:
        digest, size, body = _read(path, on_read, keep=True)
    except FileNotFoundError:
        return replace(seen, outcome=MISSING, detail=f"no file at {receipt.source_path}")
    except OSError as exc:
        detail = f"{receipt.source_path}: {exc.strerror or exc}"
        return replace(seen, outcome=UNREADABLE, detail=detail)
    read = replace(seen, size=size, bytes_read=size, digest=digest)
    if recorded and digest != recorded:
        return replace(
            read,
            outcome=HASH_MISMATCH_OUTCOME,
            detail=f"{receipt.source_path}: {size} bytes hash to {digest[:16]}…, "
            f"the receipt records {recorded[:16]}…",
        )
    if parsed_hash and parsed_hash == digest:
        return replace(read, parsed=True)
    problem = coverage_problem(body, receipt)
    if problem is not None:
        coverage = problem.startswith(("events of", "no events")) or "transcript entries" in problem
        outcome = COVERAGE_MISMATCH if coverage else UNREADABLE
        return replace(read, outcome=outcome, detail=f"{receipt.source_path}: {problem}")
    return replace(read, parsed=True)


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
