"""Workspace-relative path checks: nothing an import reads or writes may leave its workspace."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from .errors import ImportSourceError

CHECKPOINT_DIR = "memory/.checkpoints"
RAW_FALLBACK_DIR = "memory/.raw_fallbacks"
# Flush-derived rows carry ``session:<key>:<turn>`` in source_path: an identifier, not a file.
PSEUDO_PATH_PREFIX = "session:"
_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:")


def unsafe_reason(path: str) -> str | None:
    """Why ``path`` cannot be a workspace-relative file path, or None when it is safe."""
    if "\x00" in path:
        return "contains a NUL character"
    normalised = path.replace("\\", "/")
    if normalised.startswith("/") or _WINDOWS_DRIVE.match(normalised):
        return "is absolute"
    if any(part == ".." for part in normalised.split("/")):
        return "climbs out of the workspace with '..'"
    return None


def is_file_path(path: str | None) -> bool:
    return bool(path) and not str(path).startswith(PSEUDO_PATH_PREFIX)


def check_receipt_path(receipt_id: str, column: str, path: str | None) -> None:
    """Refuse a receipt whose file path could make a later reader escape the workspace."""
    if not is_file_path(path):
        return
    reason = unsafe_reason(str(path))
    if reason:
        raise ImportSourceError(f"receipt {receipt_id}: {column} {path!r} {reason}; import refused")


def normalise(path: str) -> str:
    return str(PurePosixPath(path.replace("\\", "/")))


def resolve_inside(root: Path, relative: str) -> Path:
    """``root / relative``, resolved; raises ``ImportSourceError`` if it lands outside."""
    reason = unsafe_reason(relative)
    if reason:
        raise ImportSourceError(f"path {relative!r} {reason}")
    base = root.resolve()
    target = (base / relative).resolve()
    if target != base and base not in target.parents:
        raise ImportSourceError(f"path {relative!r} resolves outside {base}")
    return target
