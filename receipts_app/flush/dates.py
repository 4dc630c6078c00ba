"""Resolving a candidate's event date against its source date (docs/UPSTREAM.md#provider-output).

Models often answer "yesterday" or "last month"; memory notes must carry an absolute date,
so relative phrases are resolved against the date of the message they came from.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

DATE_RE = re.compile(r"^\d{4}(?:-\d{2}(?:-\d{2})?)?$")
SOURCE_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}
_DAYS_AGO_RE = re.compile(r"(?P<count>\d+|one|two|three|four|five|six|seven) days ago")
_LAST_WEEKDAY_RE = re.compile(r"last (?P<weekday>[a-z]+)")
_NAMED_FORMATS = (
    ("%B %Y", "month"),
    ("%b %Y", "month"),
    ("%B %d, %Y", "day"),
    ("%b %d, %Y", "day"),
    ("%d %B %Y", "day"),
    ("%d %b %Y", "day"),
)

DateResolution = tuple[str | None, str | None, str | None]


def granularity_for(value: str) -> str:
    return {10: "day", 7: "month"}.get(len(value), "year")


def _month(source: datetime, offset: int) -> str:
    index = source.year * 12 + source.month - 1 + offset
    return f"{index // 12:04d}-{index % 12 + 1:02d}"


def _day(source: datetime, offset_days: int) -> str:
    return (source + timedelta(days=offset_days)).strftime("%Y-%m-%d")


def _relative(
    lowered: str, source: datetime, granularity: str | None, basis: str | None
) -> DateResolution | None:
    fixed: dict[str, tuple[str, str, str]] = {
        "yesterday": (_day(source, -1), "day", "relative:yesterday"),
        "tomorrow": (_day(source, 1), "day", "relative:tomorrow"),
        "last year": (f"{source.year - 1:04d}", "year", "relative:last_year"),
        "last month": (_month(source, -1), "month", "relative:last_month"),
        "next month": (_month(source, 1), "month", "relative:next_month"),
        "last week": (_day(source, -7), "day", "relative:last_week"),
        "past week": (_day(source, -7), "day", "relative:last_week"),
        "next week": (_day(source, 7), "day", "relative:next_week"),
    }
    if lowered in fixed:
        value, default_granularity, default_basis = fixed[lowered]
        return value, granularity or default_granularity, basis or default_basis
    days_ago = _DAYS_AGO_RE.fullmatch(lowered)
    if days_ago:
        raw = days_ago.group("count")
        count = _NUMBER_WORDS.get(raw) or (int(raw) if raw.isdigit() else 0)
        if count > 0:
            label = raw if not raw.isdigit() else str(count)
            return (
                _day(source, -count),
                granularity or "day",
                basis or f"relative:{label}_days_ago",
            )
    last_weekday = _LAST_WEEKDAY_RE.fullmatch(lowered)
    if last_weekday and last_weekday.group("weekday") in _WEEKDAYS:
        name = last_weekday.group("weekday")
        # "last tuesday" said on a tuesday means a week ago, never today.
        delta = (source.weekday() - _WEEKDAYS.index(name)) % 7 or 7
        return _day(source, -delta), granularity or "day", basis or f"relative:last_{name}"
    return None


def normalize_candidate_date(
    value: object, *, source_date: str, granularity: str | None, date_basis: str | None
) -> DateResolution:
    """Return ``(date, granularity, date_basis)``; ``date`` is None when unparseable."""
    # Capped: the value is model output and ends up inside an HTML comment.
    text = " ".join(str(value or "").split())[:64]
    if not text:
        return None, granularity, date_basis
    try:
        source = datetime.strptime(source_date, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        source = None
    if source is not None:
        relative = _relative(text.lower(), source, granularity, date_basis)
        if relative is not None:
            return relative
    # Absolute forms next; a trailing time ("2024-05-01T10:00") is dropped, not rejected.
    iso_day = re.fullmatch(r"(?P<date>\d{4}-\d{2}-\d{2})(?:[T\s].*)?", text)
    if iso_day:
        return iso_day.group("date"), granularity or "day", date_basis
    iso_month = re.fullmatch(r"(?P<year>\d{4})-(?P<month>\d{1,2})", text)
    if iso_month and 1 <= int(iso_month.group("month")) <= 12:
        month = int(iso_month.group("month"))
        return f"{iso_month.group('year')}-{month:02d}", granularity or "month", date_basis
    if re.fullmatch(r"\d{4}", text):
        return text, granularity or "year", date_basis
    for fmt, resolved_granularity in _NAMED_FORMATS:
        try:
            parsed = datetime.strptime(text, fmt)
        except ValueError:
            continue
        shape = "%Y-%m" if resolved_granularity == "month" else "%Y-%m-%d"
        return parsed.strftime(shape), granularity or resolved_granularity, date_basis
    return None, None, date_basis
