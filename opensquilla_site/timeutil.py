"""Epoch-millisecond time, the unit of every timestamp in the ledger (OpenSquilla fidelity)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any


def now_ms() -> int:
    return int(time.time() * 1000)


def ms_to_datetime(value: int | None) -> datetime | None:
    if value is None:
        return None
    return datetime.fromtimestamp(value / 1000, tz=UTC)


def datetime_to_ms(value: datetime) -> int:
    return int(value.timestamp() * 1000)


def ms_text(value: Any) -> str:
    """Epoch milliseconds as an operator reads them, ``YYYY-MM-DD HH:MM:SS UTC``: the one
    format of every page and admin column ("—" for None, the raw value for nonsense)."""
    if value is None or value == "":
        return "—"
    try:
        moment = datetime.fromtimestamp(int(value) / 1000, tz=UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return str(value)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def duration_text(seconds: Any) -> str:
    """A duration as an operator reads it: "45 s", "12 min", "3 h 5 min", "2 d 4 h"."""
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
