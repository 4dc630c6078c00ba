"""Admin columns for epoch-millisecond times, so every admin page shows dates, not raw ms.

The rule for which columns are times: an integer field named ``*_at`` or ``*_at_ms`` holds
epoch milliseconds (the ledger's one time unit). ``ms_column`` is a list or read-only column
that shows such a field as a UTC date and still sorts by the raw value.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

from django.contrib import admin
from django.db import models
from django.http import HttpRequest

from .timeutil import ms_text

AdminField = str | Callable[[Any], str]


def is_ms_field(field: models.Field) -> bool:
    return isinstance(field, models.IntegerField) and field.name.endswith(("_at", "_at_ms"))


@functools.cache  # one callable per column: Django matches read-only entries by identity
def ms_column(name: str, description: str | None = None) -> Callable[[Any], str]:
    label = description or name.removesuffix("_ms").replace("_", " ")

    @admin.display(description=label, ordering=name)
    def show(obj: Any) -> str:
        return ms_text(getattr(obj, name))

    show.__name__ = f"{name}_date"
    return show


def with_dates(model: type[models.Model], names: Iterable[str]) -> tuple[AdminField, ...]:
    """``names`` (a ``list_display`` or read-only list) with every time column shown as a date."""
    fields = {f.name: f for f in model._meta.fields}
    return tuple(
        ms_column(name) if name in fields and is_ms_field(fields[name]) else name for name in names
    )


def readonly_with_dates(model: type[models.Model]) -> list[AdminField]:
    """Every field of ``model``, read-only, times as dates (for admins that change nothing)."""
    return list(with_dates(model, [f.name for f in model._meta.fields]))


class ShowOnlyAdmin(admin.ModelAdmin):
    """An admin whose detail page only shows: every field read-only, times as dates.

    ``get_fields`` names the date columns instead of the raw fields, so the raw milliseconds
    are not shown beside them. Adding, changing and deleting stay each admin's own choice.
    """

    # Any: django-stubs types these lists as field names only; Django takes callables too.
    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return readonly_with_dates(self.model)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return readonly_with_dates(self.model)
