"""Template filters of the operations pages (``{% load operations %}``)."""

from __future__ import annotations

from typing import Any

from django import template

register = template.Library()


@register.filter
def age(seconds: Any) -> str:
    """A duration in seconds as an operator reads it: "45 s", "12 min", "3 h 5 min", "2 d 4 h"."""
    if seconds is None or seconds == "":
        return "—"
    try:
        total = int(float(seconds))
    except (TypeError, ValueError):
        return "—"
    if total < 60:
        return f"{total} s"
    minutes, _ = divmod(total, 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


@register.filter
def ms_age(value: Any, now_ms: Any) -> str:
    """The age of an epoch-ms timestamp at ``now_ms``."""
    try:
        return age(max(0, int(now_ms) - int(value)) / 1000)
    except (TypeError, ValueError):
        return "—"


@register.inclusion_tag("operations/_time_at_risk.html")
def time_at_risk_panel() -> dict[str, Any]:
    """The overview's time-at-risk panel (its data comes from the daily rollups, two queries)."""
    from operations_app.time_at_risk import time_at_risk_by_agent

    return {"agents": time_at_risk_by_agent()}
