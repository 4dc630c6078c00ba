"""Keyset pagination shared by every list (console pages, API lists, CLI exports).

Cursors are opaque base64 of ``<order value>:<id>``; no OFFSET is ever used, so a page costs
the same on the millionth row as on the first.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet

from .exceptions import ValidationFailed

MAX_PAGE_SIZE = 500


def encode_cursor(order_value: int, row_id: int) -> str:
    return base64.urlsafe_b64encode(f"{order_value}:{row_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> tuple[int, int] | None:
    """Parse an opaque cursor; a forged or garbled one raises ``ValidationFailed``."""
    if not cursor:
        return None
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value_text, id_text = base64.urlsafe_b64decode(padded.encode()).decode().split(":")
        return int(value_text), int(id_text)
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise ValidationFailed("cursor is not valid; start again from the first page") from exc


@dataclass
class Page:
    rows: list[Any]
    next_cursor: str | None

    @property
    def has_more(self) -> bool:
        return self.next_cursor is not None


def keyset_after(
    qs: QuerySet[Any, Any],
    *,
    order_field: str,
    value: Any,
    tie_field: str = "id",
    tie_value: Any,
    newest_first: bool,
) -> QuerySet[Any, Any]:
    """The rows that come after ``(value, tie_value)`` in ``(order_field, tie_field)`` order.

    The one keyset step of every list, batch loop and plan page. The redundant bound on
    ``order_field`` alone is what an index can seek to; the OR alone makes PostgreSQL scan
    the ordering index from its start on every page.
    """
    if newest_first:
        return qs.filter(
            Q(**{f"{order_field}__lte": value}),
            Q(**{f"{order_field}__lt": value})
            | Q(**{order_field: value, f"{tie_field}__lt": tie_value}),
        )
    return qs.filter(
        Q(**{f"{order_field}__gte": value}),
        Q(**{f"{order_field}__gt": value})
        | Q(**{order_field: value, f"{tie_field}__gt": tie_value}),
    )


def keyset_page(
    qs: QuerySet[Any],
    *,
    cursor: str | None,
    limit: int,
    newest_first: bool = True,
    order_field: str = "created_at",
) -> Page:
    """One page of ``qs`` ordered by ``(order_field, id)``; fetches ``limit + 1`` rows."""
    if limit < 1 or limit > MAX_PAGE_SIZE:
        raise ValidationFailed(f"limit must be between 1 and {MAX_PAGE_SIZE}")
    position = decode_cursor(cursor)
    if position is not None:
        value, row_id = position
        qs = keyset_after(
            qs, order_field=order_field, value=value, tie_value=row_id, newest_first=newest_first
        )
    order = (f"-{order_field}", "-id") if newest_first else (order_field, "id")
    rows = list(qs.order_by(*order)[: limit + 1])
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        last = rows[-1]
        next_cursor = encode_cursor(getattr(last, order_field), last.id)
    return Page(rows=rows, next_cursor=next_cursor)
