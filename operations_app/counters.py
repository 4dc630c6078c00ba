"""Monotonic counters kept in the database, so every process adds to the same number.

``bump`` runs inside the caller's transaction: a requeue that rolls back takes its count back
with it, so the counter agrees with the audit log.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.db import IntegrityError, transaction
from django.db.models import F

from .models import OpsCounter

REQUEUE_OUTCOMES = "requeue_outcomes"
PLAN_ROWS_PROCESSED = "plan_rows_processed"


def bump(name: str, label: str = "", by: int = 1) -> None:
    if by <= 0:
        return
    updated = OpsCounter.objects.filter(name=name, label=label).update(value=F("value") + by)
    if updated:
        return
    try:
        with transaction.atomic():
            OpsCounter.objects.create(name=name, label=label, value=by)
    except IntegrityError:
        # Another process created the row between our update and insert: add to theirs.
        OpsCounter.objects.filter(name=name, label=label).update(value=F("value") + by)


def bump_many(name: str, by_label: Mapping[str, int]) -> None:
    for label, by in sorted(by_label.items()):  # sorted: a fixed lock order across processes
        bump(name, label, by)


def read_counters() -> dict[str, dict[str, int]]:
    values: dict[str, dict[str, int]] = {}
    for name, label, value in OpsCounter.objects.values_list("name", "label", "value"):
        values.setdefault(name, {})[label] = value
    return values


def count_requeue_outcomes(
    sender: object, *, outcomes: Mapping[str, int], plan_rows: int = 0, **_: object
) -> None:
    """Receiver of ``receipts_app.signals.requeue_outcomes_recorded`` (connected in apps.py)."""
    bump_many(REQUEUE_OUTCOMES, outcomes)
    bump(PLAN_ROWS_PROCESSED, "", plan_rows)
