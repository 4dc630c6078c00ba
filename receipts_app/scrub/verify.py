"""Verify one checkpoint receipt's file. Reads only: the scrub never writes into a workspace.

The checks themselves are ``filecheck``'s (the standard library only, so reader processes
run them too); this module puts what they found into the ledger's words: the status an unsafe
outcome moves a receipt to, and its reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings

from sessions_app.gateways import served_gateway

from ..models import MemoryDurableReceipt
from ..statuses import CHECKPOINT_MISSING, HASH_MISMATCH
from .filecheck import (
    COVERAGE_MISMATCH,
    HASH_MISMATCH_OUTCOME,
    MISSING,
    NO_WORKSPACE,
    OK,
    OUTCOMES,
    UNREADABLE,
    Found,
    OnRead,
    Wanted,
    check_file,
    check_files,
    resolved_root,
)

__all__ = [
    "COVERAGE_MISMATCH",
    "HASH_MISMATCH_OUTCOME",
    "MISSING",
    "NO_WORKSPACE",
    "OK",
    "OUTCOMES",
    "UNREADABLE",
    "Verification",
    "checkpoint_root",
    "resolved_root",
    "verify_file",
    "verify_files",
    "verify_receipt",
]

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


class Verification(Found):
    """What a check found (``filecheck.Found``'s fields), in the ledger's words."""

    __slots__ = ()

    @classmethod
    def of(cls, found: Found) -> Verification:
        return cls._make(found)

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


def verify_file(
    receipt: Any,
    root: Path | None,
    *,
    parsed_hash: str = "",
    on_read: OnRead | None = None,
) -> Verification:
    """Read ``receipt``'s file under ``root`` in full and say what it is (``filecheck``).

    ``parsed_hash``: bytes with this sha256 were parsed before and carried the coverage, so
    the same bytes are hashed and not parsed again.
    """
    return Verification.of(check_file(wanted(receipt, parsed_hash), root, on_read=on_read))


def verify_files(files: list[Wanted], root: Path | None) -> list[Verification]:
    """``verify_file`` of each, unthrottled: the kernel is asked for all of them before the
    first is read (``filecheck.check_files``)."""
    return [Verification.of(found) for found in check_files(files, root)]


def wanted(receipt: Any, parsed_hash: str = "") -> Wanted:
    """What a check needs of ``receipt`` (a model or a row with the same attributes)."""
    return Wanted(
        receipt.source_path,
        receipt.content_hash,
        receipt.session_key,
        receipt.turn_id,
        receipt.coverage_entry_count,
        parsed_hash,
    )


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
