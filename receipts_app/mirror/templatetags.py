"""Template library ``mirror``: the mirror's state for the overview partial, so the overview
view needs no change (``templates/console/_mirror_status.html``)."""

from __future__ import annotations

from typing import Any

from django import template

from .state import mirror_states as _mirror_states

register = template.Library()


@register.simple_tag
def mirror_states() -> list[dict[str, Any]]:
    return _mirror_states()


@register.filter
def duration_ms(value: Any) -> str:
    """``1234`` -> ``1.2 s``; ``None`` -> ``—``."""
    if value is None or value == "":
        return "—"
    ms = int(value)
    if ms < 1000:
        return f"{ms} ms"
    if ms < 120_000:
        return f"{ms / 1000:.1f} s"
    if ms < 7_200_000:
        return f"{ms // 60_000} min"
    return f"{ms // 3_600_000} h"
