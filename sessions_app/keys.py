"""Session-key canonicalisation, byte-compatible with OpenSquilla (docs/UPSTREAM.md#session-keys)."""

from __future__ import annotations

import re

_AGENT_ID_INVALID = re.compile(r"[^a-z0-9_-]")
_AGENT_ID_MAX = 64
DEFAULT_AGENT_ID = "main"


def normalize_agent_id(value: object) -> str:
    text = "" if value is None else str(value).strip()
    if not text or text.lower() == "default":
        return DEFAULT_AGENT_ID
    cleaned = _AGENT_ID_INVALID.sub("-", text.lower()).strip("-")[:_AGENT_ID_MAX]
    # Upstream maps an id that sanitises to nothing to "default", which itself means "main".
    return cleaned or DEFAULT_AGENT_ID


def canonicalize_session_key(key: object) -> str:
    text = "" if key is None else str(key).strip()
    if not text:
        return ""
    if text == "webchat:default":
        return "agent:main:webchat:default"
    if text.startswith("subagent:agent:"):
        return "subagent:" + canonicalize_session_key(text[len("subagent:") :])
    if text.startswith("agent:"):
        parts = text.split(":")
        parts[1] = normalize_agent_id(parts[1])
        return ":".join(parts)
    return text


def agent_id_for_session_key(session_key: str) -> str | None:
    """The agent a canonical key belongs to (``agent:<id>:…``), or None for other key shapes."""
    key = session_key[len("subagent:") :] if session_key.startswith("subagent:") else session_key
    if key.startswith("agent:"):
        parts = key.split(":")
        return parts[1] if len(parts) > 1 else None
    return None


def agent_prefix(agent_id: str) -> str:
    return f"agent:{normalize_agent_id(agent_id)}:"
