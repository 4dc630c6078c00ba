"""Epoch-millisecond time, the unit of every timestamp in the ledger (OpenSquilla fidelity)."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def now_ms() -> int:
    return int(time.time() * 1000)


def ms_to_datetime(value: int | None) -> datetime | None:
    if value is None:
        return None
    return datetime.fromtimestamp(value / 1000, tz=UTC)


def datetime_to_ms(value: datetime) -> int:
    return int(value.timestamp() * 1000)
