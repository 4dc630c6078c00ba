"""Failure groups over the whole ledger, kept up to date as failures arrive.

A group is every failed receipt with the same scope, status and reason fingerprint (the reason
with ids, session keys, paths, hex digests and numbers masked). The receipts table's triggers
append each row entering (+1) or leaving (-1) a failure status to ``FailureInbox`` in the
writer's transaction; :func:`fold_failure_inbox` turns those entries into group counts
(``FailureGroupCount``). Fingerprints need Python's regular expressions, hence the inbox rather
than a trigger doing it all. The beat task ``fold_ledger_aggregates`` folds every few seconds,
and the overview folds what is left before it reads.

``first_seen``/``last_seen`` are the oldest and newest ``created_at`` of a receipt that ever
joined the group; a group whose receipts were all resolved drops to zero and is not shown.
"""

# Every interpolated name is a table-name constant.
# ruff: noqa: S608

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import connection, transaction

from .ledger.triggers import GROUPS, INBOX, T, lock_writers
from .statuses import FAILURE_STATUSES

# Inbox rows folded per transaction: bounded, so a reader folding is bounded too.
FOLD_BATCH = 5_000

_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"),
        "<id>",
    ),
    (re.compile(r"agent:[^\s'\"]+"), "<session>"),
    (re.compile(r"(?:[A-Za-z]:)?[\\/]?(?:[\w.@~-]+[\\/])+[\w.@~-]*"), "<path>"),
    (re.compile(r"\b(?:0x)?[0-9a-fA-F]{8,}\b"), "<hex>"),
    (re.compile(r"\d+(?:\.\d+)?"), "<n>"),
)
_SPACES = re.compile(r"\s+")
FINGERPRINT_LENGTH = 300


def fingerprint_reason(reason: str | None) -> str:
    """The reason with ids, session keys, paths, hex digests and numbers masked."""
    text = (reason or "").strip()
    for pattern, placeholder in _MASKS:
        text = pattern.sub(placeholder, text)
    return _SPACES.sub(" ", text)[:FINGERPRINT_LENGTH]


@dataclass
class _Change:
    delta: int = 0
    first_seen: int | None = None
    last_seen: int | None = None
    sample: str = ""

    def add(self, sign: int, receipt_id: str, created_at: int) -> None:
        self.delta += sign
        if sign > 0:
            self.first_seen = min(created_at, self.first_seen or created_at)
            if self.last_seen is None or created_at >= self.last_seen:
                self.last_seen = created_at
                self.sample = receipt_id


GroupKey = tuple[str, str, str]


def group_changes(entries: Iterable[tuple[str, str, str, str | None, int, int]]) -> dict:
    """Inbox entries ``(receipt_id, scope, status, reason, created_at, sign)`` per group."""
    changes: dict[GroupKey, _Change] = {}
    for receipt_id, scope, status, reason, created_at, sign in entries:
        key = (scope, status, fingerprint_reason(reason))
        changes.setdefault(key, _Change()).add(int(sign), receipt_id, int(created_at))
    return changes


_APPLY = (
    f"INSERT INTO {GROUPS} AS g (scope, status, fingerprint, count, first_seen, last_seen, "
    "sample_receipt_id) VALUES (%s, %s, %s, %s, COALESCE(%s, 0), COALESCE(%s, 0), %s) "
    "ON CONFLICT (scope, status, fingerprint) DO UPDATE SET "
    "count = g.count + excluded.count, "
    # A group that had dropped to zero starts its span again from its new arrivals.
    "first_seen = CASE WHEN %s IS NULL THEN g.first_seen "
    "WHEN g.count <= 0 OR excluded.first_seen < g.first_seen THEN excluded.first_seen "
    "ELSE g.first_seen END, "
    "last_seen = CASE WHEN %s IS NULL THEN g.last_seen "
    "WHEN excluded.last_seen >= g.last_seen OR g.count <= 0 THEN excluded.last_seen "
    "ELSE g.last_seen END, "
    "sample_receipt_id = CASE WHEN excluded.sample_receipt_id <> '' "
    "AND (excluded.last_seen >= g.last_seen OR g.count <= 0) THEN excluded.sample_receipt_id "
    "ELSE g.sample_receipt_id END"
)


def _claim_sql() -> str:
    inner = f"SELECT id FROM {INBOX} ORDER BY id LIMIT %s"
    if connection.vendor == "postgresql":
        inner += " FOR UPDATE SKIP LOCKED"  # concurrent folders take disjoint entries
    return (
        f"DELETE FROM {INBOX} WHERE id IN ({inner}) "
        "RETURNING receipt_id, scope, status, reason, created_at, sign"
    )


def fold_failure_inbox(batch: int = FOLD_BATCH) -> int:
    """Fold up to ``batch`` inbox entries into the group counts; returns how many."""
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(_claim_sql(), [batch])
        entries = cur.fetchall()
        changes = group_changes(entries)
        cur.executemany(
            _APPLY,
            [
                (*key, c.delta, c.first_seen, c.last_seen, c.sample, c.first_seen, c.last_seen)
                for key, c in changes.items()
                if c.delta or c.first_seen is not None
            ],
        )
    return len(entries)


def fold_all(batch: int = FOLD_BATCH) -> int:
    total = 0
    while folded := fold_failure_inbox(batch):
        total += folded
    return total


def recompute() -> dict[GroupKey, int]:
    """Group counts straight from the receipts table (streams every failed row)."""
    counts: dict[GroupKey, int] = {}
    marks = ", ".join(["%s"] * len(FAILURE_STATUSES))
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT scope, status, reason FROM {T} WHERE status IN ({marks})",
            list(FAILURE_STATUSES),
        )
        while chunk := cur.fetchmany(5_000):
            for scope, status, reason in chunk:
                key = (scope, status, fingerprint_reason(reason))
                counts[key] = counts.get(key, 0) + 1
    return counts


def stored() -> dict[GroupKey, int]:
    with connection.cursor() as cur:
        cur.execute(f"SELECT scope, status, fingerprint, count FROM {GROUPS} WHERE count <> 0")
        return {(sc, st, fp): int(n) for sc, st, fp, n in cur.fetchall()}


def rebuild_groups() -> None:
    """Replace the groups by a regrouping of every failed receipt, writers held off."""
    with transaction.atomic(), connection.cursor() as cur:
        for sql in lock_writers(connection.vendor):
            cur.execute(sql)
        cur.execute(f"DELETE FROM {INBOX}")
        cur.execute(f"DELETE FROM {GROUPS}")
        marks = ", ".join(["%s"] * len(FAILURE_STATUSES))
        cur.execute(
            f"SELECT receipt_id, scope, status, reason, created_at, 1 FROM {T} "
            f"WHERE status IN ({marks})",
            list(FAILURE_STATUSES),
        )
        changes = group_changes(cur.fetchall())
        cur.executemany(
            _APPLY,
            [
                (*key, c.delta, c.first_seen, c.last_seen, c.sample, c.first_seen, c.last_seen)
                for key, c in changes.items()
            ],
        )
