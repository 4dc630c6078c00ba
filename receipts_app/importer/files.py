"""Copying the checkpoint JSONL files and raw-fallback archives into our workspaces.

Files are copied, never linked: the product must keep working when the old OpenSquilla
install is removed. A file already at the target path is never replaced. The same bytes
count as unchanged; different bytes are a conflict the operator resolves by hand, because
the local file may be newer evidence than the import.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from .paths import CHECKPOINT_DIR, RAW_FALLBACK_DIR, resolve_inside
from .report import ImportReport

SIDECAR_DIR = ".repair_receipts"
DEFAULT_AGENT = "main"


@dataclass(frozen=True)
class PlannedCopy:
    source: Path
    relative: str  # posix, relative to the workspace root (memory/...)
    dest_root: Path


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _walk_regular_files(
    workspace: Path, subdir: str, report: ImportReport
) -> Iterable[tuple[Path, str]]:
    """Regular files under ``workspace/subdir`` as (path, workspace-relative posix path).

    Symlinks are refused, not followed: a link to /etc/shadow in an imported workspace must
    not become a readable file in ours.
    """
    root = workspace.resolve()
    top = workspace / subdir
    if top.is_symlink():
        report.files.refused += 1
        report.warn("refused", f"{subdir} is a symlink; not followed")
        return
    if not top.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        here = Path(dirpath)
        for name in sorted(dirnames):
            if (here / name).is_symlink():
                report.files.refused += 1
                report.warn("refused", f"{(here / name).relative_to(workspace)} is a symlink")
        dirnames.sort()
        for name in sorted(filenames):
            path = here / name
            relative = path.relative_to(workspace).as_posix()
            if path.is_symlink() or not path.is_file():
                report.files.refused += 1
                report.warn("refused", f"{relative} is not a regular file; not copied")
                continue
            if root not in path.resolve().parents:
                report.files.refused += 1
                report.warn("refused", f"{relative} resolves outside the workspace")
                continue
            yield path, relative


def _raw_fallback_owner(relative: str) -> str:
    """The archive a raw-fallback file belongs to: itself, or the one its sidecar describes."""
    parts = relative.split("/")
    prefix = RAW_FALLBACK_DIR.split("/")
    inner = parts[len(prefix) :]
    if len(inner) == 2 and inner[0] == SIDECAR_DIR and inner[1].endswith(".json"):
        return f"{RAW_FALLBACK_DIR}/{inner[1][: -len('.json')]}"
    return relative


def plan_copies(
    *,
    workspace: Path,
    checkpoint_root: Path,
    memory_root_for: Callable[[str], Path],
    agents_by_path: Mapping[str, set[str]],
    report: ImportReport,
) -> list[PlannedCopy]:
    """Checkpoints go to the checkpoint workspace; each raw archive goes to the memory
    workspace of every agent whose receipts name it (``main`` when none does)."""
    plans: list[PlannedCopy] = []
    for path, relative in _walk_regular_files(workspace, CHECKPOINT_DIR, report):
        plans.append(PlannedCopy(path, relative, checkpoint_root))
    for path, relative in _walk_regular_files(workspace, RAW_FALLBACK_DIR, report):
        agents = agents_by_path.get(_raw_fallback_owner(relative)) or {DEFAULT_AGENT}
        roots = {memory_root_for(agent) for agent in sorted(agents)}
        for root in sorted(roots):
            plans.append(PlannedCopy(path, relative, root))
    return plans


def _write_atomically(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def copy_planned(plans: Iterable[PlannedCopy], report: ImportReport, created: list[Path]) -> None:
    """Copy each planned file; appends every file it creates to ``created`` (for rollback)."""
    done: set[Path] = set()
    for plan in plans:
        target = resolve_inside(plan.dest_root, plan.relative)
        if target in done:
            continue
        done.add(target)
        data = plan.source.read_bytes()
        if target.exists() or target.is_symlink():
            if target.is_file() and not target.is_symlink():
                if hashlib.sha256(data).hexdigest() == sha256_file(target):
                    report.files.unchanged += 1
                    continue
            report.files.conflicts += 1
            report.warn(
                "file_conflict",
                f"{target} already exists with different content; kept, not replaced",
            )
            continue
        _write_atomically(target, data)
        created.append(target)
        report.files.copied += 1


def remove_created(created: Iterable[Path]) -> None:
    """Best-effort undo of the files one failed import created."""
    for path in created:
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass


def plan_named_copies(
    *,
    workspace: Path,
    checkpoint_root: Path,
    memory_root_for: Callable[[str], Path],
    agents_by_path: Mapping[str, set[str]],
    report: ImportReport,
) -> list[PlannedCopy]:
    """Like :func:`plan_copies`, but only the files the given receipts name (and a raw
    archive's sidecar): what the live mirror copies after each batch, without walking the
    whole workspace."""
    plans: list[PlannedCopy] = []
    for relative, agents in sorted(agents_by_path.items()):
        if relative.startswith(CHECKPOINT_DIR + "/"):
            candidates = [(relative, [checkpoint_root])]
        elif relative.startswith(RAW_FALLBACK_DIR + "/"):
            roots = sorted({memory_root_for(agent) for agent in sorted(agents or {DEFAULT_AGENT})})
            name = relative[len(RAW_FALLBACK_DIR) + 1 :]
            sidecar = f"{RAW_FALLBACK_DIR}/{SIDECAR_DIR}/{name}.json"
            candidates = [(relative, roots), (sidecar, roots)]
        else:
            continue
        for path_text, roots in candidates:
            path = workspace / path_text
            if path.is_symlink():
                report.files.refused += 1
                report.warn("refused", f"{path_text} is a symlink; not followed")
                continue
            if not path.is_file():
                continue
            if workspace.resolve() not in path.resolve().parents:
                report.files.refused += 1
                report.warn("refused", f"{path_text} resolves outside the workspace")
                continue
            plans.extend(PlannedCopy(path, path_text, root) for root in roots)
    return plans
