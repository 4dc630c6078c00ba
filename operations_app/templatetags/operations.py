"""Template filters of the operations pages (``{% load operations %}``)."""

from __future__ import annotations

from typing import Any

from django import template

from opensquilla_site.timeutil import duration_text

register = template.Library()


@register.filter
def age(seconds: Any) -> str:
    """A duration in seconds as an operator reads it: "45 s", "12 min", "3 h 5 min", "2 d 4 h"."""
    return duration_text(seconds)


@register.filter
def ms_age(value: Any, now_ms: Any) -> str:
    """The age of an epoch-ms timestamp at ``now_ms``."""
    try:
        return age(max(0, int(now_ms) - int(value)) / 1000)
    except (TypeError, ValueError):
        return "—"
