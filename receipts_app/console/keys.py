"""Session keys and idempotency keys as the console shows them: wrapped only after a ``:``.

A key such as ``agent:main:webchat:default`` has no space, so a browser either lets it
overflow or (with ``overflow-wrap: anywhere``) breaks it anywhere, mid-word. A ``<wbr>``
after each ``:`` gives it break points at its own separators; the ``.skey`` style
(static/console/console.css) keeps the browser from breaking it anywhere else unless one
segment alone is wider than the screen.
"""

from __future__ import annotations

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

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
    """``<span class="skey">agent:<wbr>main:<wbr>…</span>``: escaped, breakable after each
    ``:`` only; empty for an empty key."""
    text = "" if key is None else str(key)
    if not text:
        return mark_safe("")  # noqa: S308 - a constant
    if limit:
        text = shorten_key(text, int(limit))
    parts = escape(text).split(":")
    return mark_safe(  # noqa: S308 - every part was escaped above
        '<span class="skey">' + ":<wbr>".join(parts) + "</span>"
    )
