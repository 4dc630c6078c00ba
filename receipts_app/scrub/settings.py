"""The scrub's settings, read at call time so a test can override them."""

from __future__ import annotations

from django.conf import settings


def _number(name: str, default: float) -> float:
    try:
        value = float(getattr(settings, name, default))
    except (TypeError, ValueError):
        return default
    return value if value >= 0 else default


def read_bytes_per_second() -> float:
    """The read rate a scrub keeps to (0: unthrottled)."""
    return _number("OPENSQUILLA_SCRUB_READ_BYTES_PER_SECOND", 20 * 1024 * 1024)


def cycle_seconds() -> float:
    """How often a cycle over every checkpoint starts (unchanged files cost a ``stat``)."""
    return _number("OPENSQUILLA_SCRUB_CYCLE_SECONDS", 3600)


def full_cycle_seconds() -> float:
    """How often a cycle reads every file in full, changed or not."""
    return _number("OPENSQUILLA_SCRUB_FULL_CYCLE_SECONDS", 86400)


def run_seconds() -> float:
    """How long one scheduled run goes on before it leaves the rest to the next (resumable)."""
    return _number("OPENSQUILLA_SCRUB_RUN_SECONDS", 240)


def reader_processes() -> int:
    """Processes an unthrottled scrub reads its files in (0: this process's threads only)."""
    return int(_number("OPENSQUILLA_SCRUB_READER_PROCESSES", 2))
