"""Session keys and idempotency keys as the console shows them: wrapped only after a ``:``.

A key such as ``agent:main:webchat:default`` has no space, so a browser either lets it
overflow or (with ``overflow-wrap: anywhere``) breaks it anywhere, mid-word, or after a
``-`` inside a segment (``research-`` / ``assistant``). Here each segment and its ``:`` is
one unbreakable span, with a ``<wbr>`` between them: the key wraps at its own separators
only. A segment too long for a phone's line (over :data:`UNBROKEN_SEGMENT_CHARS`) stays
breakable, so it wraps instead of widening the page (static/console/console.css ``.skey``).
"""

from __future__ import annotations

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

# A segment up to this long never breaks (a 390 px card's line holds about 42 characters).
UNBROKEN_SEGMENT_CHARS = 40
# A key longer than this is cut at a ``:`` before it (the full key is the link's title and
# the page the link opens), so one row never fills a phone's screen.
DEFAULT_MAX_CHARS = 120


def shorten_key(key: str, limit: int = DEFAULT_MAX_CHARS) -> str:
    """``key`` itself when short enough, else its longest ``:``-prefix within ``limit`` and
    an ellipsis (a hard cut only when the first segment alone is too long)."""
    if len(key) <= limit:
        return key
    cut = key.rfind(":", 0, limit)
    return (key[: cut + 1] if cut > 0 else key[: limit - 1]) + "…"


def wrapped_key(key: object, limit: int | None = DEFAULT_MAX_CHARS) -> SafeString:
    """``<span class="skey"><span>agent:</span><wbr><span>main:</span>…</span>``: escaped,
    breakable after each ``:`` only; empty for an empty key."""
    text = "" if key is None else str(key)
    if not text:
        return mark_safe("")  # noqa: S308 - a constant
    if limit:
        text = shorten_key(text, int(limit))
    parts = text.split(":")
    pieces = [part + (":" if i < len(parts) - 1 else "") for i, part in enumerate(parts)]
    html = "<wbr>".join(
        f"<span>{escape(piece)}</span>"
        if len(piece) <= UNBROKEN_SEGMENT_CHARS
        else str(escape(piece))
        for piece in pieces
        if piece
    )
    return mark_safe(f'<span class="skey">{html}</span>')  # noqa: S308 - pieces escaped
