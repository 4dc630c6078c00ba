"""Keyset pagination shared by every list (console pages, API lists, CLI exports).

Cursors are opaque base64 of ``<order value>:<id>``; no OFFSET is ever used, so a page costs
the same on the millionth row as on the first.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connections
from django.db.models import Q, QuerySet
from django.db.models.query import RawQuerySet

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
    return keyset_page_of_parts(
        [qs], cursor=cursor, limit=limit, newest_first=newest_first, order_field=order_field
    )


def keyset_page_of_parts(
    parts: Sequence[QuerySet[Any]],
    *,
    cursor: str | None,
    limit: int,
    newest_first: bool = True,
    order_field: str = "created_at",
) -> Page:
    """One page of the union of ``parts`` (disjoint querysets of one model), in one query.

    The same page as ``keyset_page`` of the querysets' OR, for a filter no index serves in
    the page's order (``status IN (a, b, c)`` ordered by time): each part is its own keyset
    page of ``limit + 1`` rows, which an index in that order can serve (``status = a``
    ordered by time walks ``(status, created_at, id)``), and the statement keeps the first
    ``limit + 1`` of their ``UNION ALL``. Every part is a sub-select, as SQLite allows
    ``ORDER BY`` and ``LIMIT`` only there in a compound select. The parts must not share a
    row (a row in two parts would be listed twice).
    """
    if limit < 1 or limit > MAX_PAGE_SIZE:
        raise ValidationFailed(f"limit must be between 1 and {MAX_PAGE_SIZE}")
    if not parts:
        return Page(rows=[], next_cursor=None)
    position = decode_cursor(cursor)
    order = (f"-{order_field}", "-id") if newest_first else (order_field, "id")
    pages = []
    for qs in parts:
        if position is not None:
            qs = keyset_after(
                qs,
                order_field=order_field,
                value=position[0],
                tie_value=position[1],
                newest_first=newest_first,
            )
        pages.append(qs.order_by(*order)[: limit + 1])
    if len(pages) == 1:
        rows = list(pages[0])
    else:
        rows = list(_union_page(pages, order_field, newest_first, limit + 1))
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        last = rows[-1]
        next_cursor = encode_cursor(getattr(last, order_field), last.id)
    return Page(rows=rows, next_cursor=next_cursor)


def _union_page(
    pages: Sequence[QuerySet[Any]], order_field: str, newest_first: bool, size: int
) -> RawQuerySet[Any]:
    """``UNION ALL`` of sliced, ordered querysets, ordered and cut again: one statement.

    Django's ``QuerySet.union`` cannot keep each part's ``ORDER BY … LIMIT`` on SQLite, so
    the parts' own compiled SQL (with their parameters: ``sql_with_params``, never
    ``str(query)``) is wrapped in sub-selects.
    """
    model = pages[0].model
    column = model._meta.get_field(order_field).column
    pk = model._meta.pk.column
    qn = connections[pages[0].db].ops.quote_name
    direction = "DESC" if newest_first else "ASC"
    branches: list[str] = []
    params: list[Any] = []
    for index, page in enumerate(pages):
        sql, part_params = page.query.sql_with_params()
        branches.append(f"SELECT * FROM ({sql}) AS {qn(f'part{index}')}")  # noqa: S608
        params.extend(part_params)
    sql = (
        " UNION ALL ".join(branches)
        + f" ORDER BY {qn(column)} {direction}, {qn(pk)} {direction} LIMIT {int(size)}"
    )
    return model._default_manager.raw(sql, params, using=pages[0].db)
