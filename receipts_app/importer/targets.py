"""Where an import or a mirror puts a gateway's files (docs/IMPORT.md, "Files").

Two gateways write the same relative paths (a checkpoint file is named by its session key and
turn, and every gateway has ``agent:main:…:default``), so each gateway's files need their own
root. ``local`` keeps the configured workspaces; another gateway, unless told otherwise, gets
``<OPENSQUILLA_CHECKPOINT_WORKSPACE>/gateways/<name>`` for its checkpoint files and its
raw-fallback archives (or the memory workspace template, when that names ``{gateway}``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from sessions_app.gateways import DEFAULT_GATEWAY

GATEWAYS_DIR = "gateways"


@dataclass(frozen=True)
class FileTargets:
    checkpoint_root: Path | None
    memory_template: str | None  # may contain {agent}; None: the checkpoint root


def file_targets(
    gateway: str, *, target_workspace: Path | None, memory_workspace: str | None
) -> FileTargets:
    """The checkpoint root and memory template for ``gateway``'s files."""
    configured = getattr(settings, "OPENSQUILLA_CHECKPOINT_WORKSPACE", None)
    template = getattr(settings, "OPENSQUILLA_MEMORY_WORKSPACE", None)
    if gateway == DEFAULT_GATEWAY:
        root = target_workspace or configured
        return FileTargets(Path(root).expanduser() if root else None, memory_workspace or template)
    if target_workspace is not None:
        root_path: Path | None = Path(target_workspace).expanduser()
    elif configured:
        root_path = Path(configured).expanduser() / GATEWAYS_DIR / gateway
    else:
        root_path = None
    if memory_workspace is None and template and "{gateway}" in template:
        memory_workspace = template
    if memory_workspace is not None:
        memory_workspace = memory_workspace.replace("{gateway}", gateway)
    return FileTargets(root_path, memory_workspace)
