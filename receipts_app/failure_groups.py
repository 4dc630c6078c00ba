"""Failure groups over the whole ledger, kept up to date as failures arrive.

A group is every receipt at risk (``statuses.AT_RISK_STATUSES``: the failures, and requeued
checkpoints until recovered) with the same gateway, agent, scope, status and reason fingerprint
(the reason with ids, session keys, paths, hex digests and numbers masked): two gateways'
failures never share a group, as they never share a count. The receipts table's
triggers append each row entering (+1) or leaving (-1) an at-risk status to
``FailureInbox`` in the writer's transaction; :func:`fold_failure_inbox` turns those entries
into group memberships (``FailureGroupMember``, one row per failed receipt, naming its group)
and group counts (``FailureGroupCount``). Fingerprints need Python's regular expressions,
hence the inbox rather than a trigger doing it all. The beat task ``fold_ledger_aggregates``
folds every few seconds.

Why the memberships: a group's count is the number of its members, changed only together
with a member row in one transaction. A fold interrupted half-way (a time limit, a crash)
rolls back whole; a fold that sees an entry twice changes nothing the second time; a leave is
booked to the group the receipt was counted in, whatever its old reason fingerprints to now.
So a count can never go negative or drift. The members also let a group's "View" and its
requeue plan select exactly the rows it counts (``ReceiptFilter.fingerprint``).

``first_seen``/``last_seen`` are the oldest and newest ``created_at`` of a receipt that ever
joined the group; a group whose receipts were all resolved drops to zero and is not shown.
"""

# Every interpolated name is a table-name constant.
# ruff: noqa: S608

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db import connection, transaction

from .ledger.triggers import GROUPS, INBOX, MEMBERS, T, lock_writers
from .statuses import AT_RISK_STATUSES

# Inbox rows folded per transaction: bounded, so a fold is bounded too.
FOLD_BATCH = 5_000
# Any constant shared by the folders: one folds at a time, the others skip (PostgreSQL).
_FOLD_LOCK = 0x05C0_0716

# Fingerprints read only this much of a reason (the database hands over no more): a
# 1,000,000-character reason costs what a 4,096-character one does. Every mask below runs in
# time linear in its input, so the bound is on work, not just on the result's length.
FINGERPRINT_INPUT_CHARS = 4_096
FINGERPRINT_LENGTH = 300

# A path is runs of these characters joined by slashes.
_PATH_CHAR = r"[\w.@~-]"
_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"),
        "<id>",
    ),
    (re.compile(r"agent:[^\s'\"]+"), "<session>"),
    # Matches what ``(?:[A-Za-z]:)?[\\/]?(?:[\w.@~-]+[\\/])+[\w.@~-]*`` matches, without its
    # quadratic backtracking over a long run with no slash (8,000 characters took 3 s):
    # a segment's run is taken whole (possessive: a shorter run is followed by a path
    # character, never by the slash it needs), and a match starts only where a run starts
    # or at a drive letter, since an attempt inside a run fails exactly as at its start.
    (
        re.compile(
            rf"(?:(?<!{_PATH_CHAR})|(?=[A-Za-z]:))"
            rf"(?:[A-Za-z]:)?[\\/]?(?:{_PATH_CHAR}++[\\/])+{_PATH_CHAR}*+"
        ),
        "<path>",
    ),
    (re.compile(r"\b(?:0x)?[0-9a-fA-F]{8,}\b"), "<hex>"),
    (re.compile(r"\d+(?:\.\d+)?"), "<n>"),
)
_SPACES = re.compile(r"\s+")


def fingerprint_reason(reason: str | None) -> str:
    """The reason with ids, session keys, paths, hex digests and numbers masked.

    Only the first ``FINGERPRINT_INPUT_CHARS`` characters count: reasons up to that length
    fingerprint exactly as they always did, and longer ones by their beginning.
    """
    text = (reason or "")[:FINGERPRINT_INPUT_CHARS].strip()
    for pattern, placeholder in _MASKS:
        text = pattern.sub(placeholder, text)
    return _SPACES.sub(" ", text)[:FINGERPRINT_LENGTH]


def _reason_sql(column: str = "reason") -> str:
    """The part of a reason a fingerprint reads, cut by the database."""
    return f"SUBSTR({column}, 1, {FINGERPRINT_INPUT_CHARS})"


GroupKey = tuple[str, str, str, str, str]  # (gateway_id, agent_id, scope, status, fingerprint)


@dataclass
class _Change:
    delta: int = 0
    first_seen: int | None = None
    last_seen: int | None = None
    sample: str = ""

    def join(self, receipt_id: str, created_at: int) -> None:
        self.delta += 1
        self.first_seen = min(created_at, self.first_seen or created_at)
        if self.last_seen is None or created_at >= self.last_seen:
            self.last_seen = created_at
            self.sample = receipt_id

    def leave(self) -> None:
        self.delta -= 1


_APPLY = (
    f"INSERT INTO {GROUPS} AS g (gateway_id, agent_id, scope, status, fingerprint, count, "
    "first_seen, last_seen, sample_receipt_id) "
    "VALUES (%s, %s, %s, %s, %s, %s, COALESCE(%s, 0), COALESCE(%s, 0), %s) "
    "ON CONFLICT (gateway_id, agent_id, scope, status, fingerprint) DO UPDATE SET "
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
_INSERT_MEMBER = (
    f"INSERT INTO {MEMBERS} (receipt_id, gateway_id, agent_id, scope, status, fingerprint, "
    "created_at) VALUES (%s, %s, %s, %s, %s, %s, %s)"
)
_CHUNK = 500


def _apply(cur, changes: dict[GroupKey, _Change]) -> None:
    cur.executemany(
        _APPLY,
        [
            (*key, c.delta, c.first_seen, c.last_seen, c.sample, c.first_seen, c.last_seen)
            for key, c in changes.items()
            if c.delta or c.first_seen is not None
        ],
    )


def _chunks(items: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


def _marks(n: int) -> str:
    return ", ".join(["%s"] * n)


def _claim_sql() -> str:
    return (
        f"DELETE FROM {INBOX} WHERE id IN (SELECT id FROM {INBOX} ORDER BY id LIMIT %s) "
        f"RETURNING id, receipt_id, scope, status, {_reason_sql()}, created_at, sign"
    )


def _members_of(cur, receipt_ids: Sequence[str]) -> dict[str, GroupKey]:
    out: dict[str, GroupKey] = {}
    for chunk in _chunks(receipt_ids):
        cur.execute(
            f"SELECT receipt_id, gateway_id, agent_id, scope, status, fingerprint FROM {MEMBERS} "
            f"WHERE receipt_id IN ({_marks(len(chunk))})",
            list(chunk),
        )
        for rid, gateway, agent, scope, status, fingerprint in cur.fetchall():
            out[rid] = (gateway, agent, scope, status, fingerprint)
    return out


def _owners_of(cur, receipt_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
    """``receipt_id -> (gateway_id, agent_id)`` of the receipts still in the table (receipt
    ids are unique across gateways)."""
    out: dict[str, tuple[str, str]] = {}
    for chunk in _chunks(receipt_ids):
        cur.execute(
            f"SELECT receipt_id, gateway_id, agent_id FROM {T} "
            f"WHERE receipt_id IN ({_marks(len(chunk))})",
            list(chunk),
        )
        for rid, gateway, agent in cur.fetchall():
            out[rid] = (gateway, agent or "")
    return out


def _take_fold_lock(cur, *, wait: bool) -> bool:
    """One folder at a time on PostgreSQL (SQLite's write lock already serialises them)."""
    if connection.vendor != "postgresql":
        return True
    if wait:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", [_FOLD_LOCK])
        return True
    cur.execute("SELECT pg_try_advisory_xact_lock(%s)", [_FOLD_LOCK])
    return bool(cur.fetchone()[0])


def fold_failure_inbox(batch: int = FOLD_BATCH, *, wait: bool = False) -> int:
    """Fold up to ``batch`` inbox entries into memberships and counts; returns how many.

    One transaction, and one folder at a time (on PostgreSQL a second one returns 0 at once,
    or with ``wait`` waits its turn): entries are applied in the order they were written, so
    a receipt's last entry in the batch says whether it is a member now, and where.
    """
    with transaction.atomic(), connection.cursor() as cur:
        if not _take_fold_lock(cur, wait=wait):
            return 0
        cur.execute(_claim_sql(), [batch])
        entries = sorted(cur.fetchall())
        if not entries:
            return 0
        last: dict[str, tuple[str, str, str | None, int, int]] = {}
        for _id, receipt_id, scope, status, reason, created_at, sign in entries:
            last[receipt_id] = (scope, status, reason, int(created_at), int(sign))
        ids = list(last)
        before = _members_of(cur, ids)
        # The gateway and agent of a receipt that is failing now; gone (deleted since): a
        # leave follows.
        owners = _owners_of(cur, [rid for rid, entry in last.items() if entry[4] > 0])
        changes: dict[GroupKey, _Change] = {}
        leaving: list[str] = []
        joining: list[tuple[str, str, str, str, str, str, int]] = []
        for rid, (scope, status, reason, created_at, sign) in last.items():
            old = before.get(rid)
            new: GroupKey | None = None
            if sign > 0 and rid in owners:
                new = (*owners[rid], scope, status, fingerprint_reason(reason))
            if old == new:
                continue
            if old is not None:
                changes.setdefault(old, _Change()).leave()
                leaving.append(rid)
            if new is not None:
                changes.setdefault(new, _Change()).join(rid, created_at)
                joining.append((rid, *new, created_at))
        for chunk in _chunks(leaving):
            cur.execute(
                f"DELETE FROM {MEMBERS} WHERE receipt_id IN ({_marks(len(chunk))})", list(chunk)
            )
        cur.executemany(_INSERT_MEMBER, joining)
        _apply(cur, changes)
    return len(entries)


def fold_all(batch: int = FOLD_BATCH, *, wait: bool = False) -> int:
    """Fold until the inbox is empty (``wait``: behind a folder already at work, as a check
    that must see every entry grouped does)."""
    total = 0
    while folded := fold_failure_inbox(batch, wait=wait):
        total += folded
    return total


def _failed_rows_sql() -> str:
    return (
        f"SELECT receipt_id, gateway_id, agent_id, scope, status, {_reason_sql()}, created_at "
        f"FROM {T} "
        f"WHERE status IN ({_marks(len(AT_RISK_STATUSES))}) ORDER BY id"
    )


def recompute() -> dict[GroupKey, int]:
    """Group counts straight from the receipts table (streams every failed row)."""
    counts: dict[GroupKey, int] = {}
    with connection.cursor() as cur:
        cur.execute(_failed_rows_sql(), list(AT_RISK_STATUSES))
        while chunk := cur.fetchmany(5_000):
            for _rid, gateway, agent, scope, status, reason, _created in chunk:
                key = (gateway, agent or "", scope, status, fingerprint_reason(reason))
                counts[key] = counts.get(key, 0) + 1
    return counts


def stored() -> dict[GroupKey, int]:
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT gateway_id, agent_id, scope, status, fingerprint, count FROM {GROUPS} "
            "WHERE count <> 0"
        )
        return {(g, a, sc, st, fp): int(n) for g, a, sc, st, fp, n in cur.fetchall()}


def rebuild_groups() -> None:
    """Replace memberships and groups by a regrouping of every failed receipt, writers held
    off (``check_counts --fix``, and the migration that changed the grouping)."""
    with transaction.atomic(), connection.cursor() as cur:
        for sql in lock_writers(connection.vendor):
            cur.execute(sql)
        _take_fold_lock(cur, wait=True)  # and folders: none may apply entries meanwhile
        for table in (INBOX, MEMBERS, GROUPS):
            cur.execute(f"DELETE FROM {table}")
        cur.execute(_failed_rows_sql(), list(AT_RISK_STATUSES))
        rows = cur.fetchall()
        changes: dict[GroupKey, _Change] = {}
        members = []
        for rid, gateway, agent, scope, status, reason, created_at in rows:
            key = (gateway, agent or "", scope, status, fingerprint_reason(reason))
            changes.setdefault(key, _Change()).join(rid, int(created_at))
            members.append((rid, *key, int(created_at)))
        for start in range(0, len(members), 5_000):
            cur.executemany(_INSERT_MEMBER, members[start : start + 5_000])
        _apply(cur, changes)
