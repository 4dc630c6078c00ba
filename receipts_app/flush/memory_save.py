"""A real ``memory_save`` tool for the flush: append markdown to a note in the workspace.

The flush only trusts a save that reports ``integrity=ok``, so the handler reads the file
back after writing and reports what it actually finds on disk.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from .safety import FLUSH_RESERVED_PATH_PREFIXES
from .types import ToolCall, ToolDefinition, ToolResult, current_tool_context

MEMORY_SAVE_DEFINITION = ToolDefinition(
    name="memory_save",
    description="Append markdown to a memory note under memory/ in the agent's workspace.",
    parameters={
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "memory/<YYYY-MM-DD>-<slug>.md"},
            "content": {"type": "string"},
            "mode": {"type": "string", "enum": ["append"]},
        },
        "required": ["path", "content"],
    },
)

_BULLET_RE = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+\S")
_HEADING_RE = re.compile(r"^\s*#{1,6}\s")
# Appends from concurrent flushes in one process must not interleave inside a note.
_WRITE_LOCK = threading.Lock()

WorkspaceResolver = Callable[[str], Any]


class MemorySaveToolRegistry:
    """The tool registry the flush service inspects: it offers only ``memory_save``."""

    def to_tool_definitions(self, context: Any = None) -> list[ToolDefinition]:
        return [MEMORY_SAVE_DEFINITION]

    def get(self, name: str) -> ToolDefinition | None:
        return MEMORY_SAVE_DEFINITION if name == "memory_save" else None


def markdown_chunks(content: str) -> list[str]:
    """Split markdown into indexable chunks: each bullet, and each plain paragraph.

    Headings only label chunks, so a note with nothing but headings has zero chunks and
    can never count as a safe flush.
    """
    chunks: list[str] = []
    paragraph: list[str] = []

    def close_paragraph() -> None:
        if paragraph:
            chunks.append("\n".join(paragraph))
            paragraph.clear()

    for line in content.splitlines():
        if not line.strip() or _HEADING_RE.match(line):
            close_paragraph()
        elif _BULLET_RE.match(line):
            close_paragraph()
            chunks.append(line.strip())
        else:
            paragraph.append(line.strip())
    close_paragraph()
    return chunks


def _target(workspace: Path, relative: str) -> Path:
    """Resolve a save path, refusing anything that is not a note inside ``memory/``."""
    if "\x00" in relative or "\\" in relative:
        raise ValueError("path contains forbidden characters")
    pure = PurePosixPath(relative)
    if pure.is_absolute() or ".." in pure.parts or pure.suffix != ".md":
        raise ValueError("path must be a relative memory/*.md path")
    if pure.parts[:1] != ("memory",) or relative.startswith(FLUSH_RESERVED_PATH_PREFIXES):
        raise ValueError("path must be under memory/ and outside the archive directories")
    root = workspace.expanduser().resolve()
    target = (root / pure).resolve()
    # resolve() follows symlinks, so a linked memory/ pointing elsewhere is caught here.
    if not target.is_relative_to(root):
        raise ValueError("path resolves outside the memory workspace")
    return target


def _append(target: Path, content: str) -> str:
    block = content.rstrip("\n") + "\n"
    with _WRITE_LOCK:
        target.parent.mkdir(parents=True, exist_ok=True)
        existing = target.read_text(encoding="utf-8") if target.is_file() else ""
        # One blank line between appended blocks keeps paragraphs from merging into one chunk.
        separator = "" if not existing else ("\n" if existing.endswith("\n") else "\n\n")
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(separator + block)
            handle.flush()
            os.fsync(handle.fileno())
        if not target.is_file():
            return "missing_file"
        # Read back: "ok" means the bytes are on disk, not just that write() returned.
        return "ok" if target.read_text(encoding="utf-8").endswith(block) else "missing_chunks"


class MemorySaveHandler:
    """Async tool handler: ``await handler(ToolCall(...)) -> ToolResult``.

    The agent comes from the flush's tool context (set by the service around the call),
    falling back to ``default_agent_id``; the workspace comes from ``workspace_resolver``.
    """

    def __init__(self, workspace_resolver: WorkspaceResolver, *, default_agent_id: str = "main"):
        self._workspace_resolver = workspace_resolver
        self._default_agent_id = default_agent_id

    async def __call__(self, call: ToolCall) -> ToolResult:
        def error(message: str) -> ToolResult:
            return ToolResult(
                tool_use_id=call.tool_use_id,
                tool_name=call.tool_name,
                content=message,
                is_error=True,
            )

        if call.tool_name != "memory_save":
            return error(f"unknown tool: {call.tool_name}")
        args = call.arguments if isinstance(call.arguments, dict) else {}
        path, content = args.get("path"), args.get("content")
        if not isinstance(path, str) or not isinstance(content, str) or not content.strip():
            return error("memory_save needs a string path and non-empty content")
        if args.get("mode", "append") != "append":
            return error("memory_save only supports mode=append")

        context = current_tool_context.get()
        agent_id = context.agent_id if context is not None else self._default_agent_id
        workspace = self._workspace_resolver(agent_id)
        if inspect.isawaitable(workspace):
            workspace = await workspace
        if workspace is None:
            return error(f"no memory workspace for agent {agent_id}")
        try:
            target = _target(Path(workspace), path)
            integrity = await asyncio.to_thread(_append, target, content)
        except (ValueError, OSError) as exc:
            return error(f"memory_save refused: {exc}")
        count = len(markdown_chunks(content))
        return ToolResult(
            tool_use_id=call.tool_use_id,
            tool_name=call.tool_name,
            content=f"Saved to {path} ({count} chunks indexed; integrity={integrity}).",
        )
