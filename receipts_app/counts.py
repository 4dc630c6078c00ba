"""Exact receipt counts per (gateway, agent, scope, status), cheap to read at any ledger size.

The table behind them (``ReceiptCount``) is written only by the database triggers of
``receipts_app/ledger/triggers.py``, in the same transaction as every write to the receipts
table. Reading it is one small GROUP BY over a few hundred rows, whatever the ledger holds: the
status tabs, the overview, health and ``/metrics`` all read :func:`receipt_counts`.

On PostgreSQL writers append signed deltas; :func:`fold_counts` sums them back into one row
per key (the beat task ``fold_ledger_aggregates`` every few seconds, or a reader that finds
more than ``FOLD_AT`` rows). ``manage.py check_counts`` recomputes the counts from the receipts
and reports (``--fix``: repairs) any drift.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, connection, transaction

from sessions_app.gateways import DEFAULT_GATEWAY, gateway_scope

from .ledger.triggers import COUNTS, KEY_COLUMNS, T, lock_writers

logger = logging.getLogger(__name__)

# Delta rows a reader tolerates before it folds them itself (a few ms of summing).
FOLD_AT = 5_000
# Any constant shared by the folders: only one folds at a time, the others skip.
_FOLD_LOCK = 0x05C0_0715
_KEY = ", ".join(KEY_COLUMNS)  # gateway_id, agent_id, scope, status


@dataclass(frozen=True)
class CountRow:
    agent_id: str
    scope: str
    status: str
    count: int
    gateway_id: str = DEFAULT_GATEWAY


def _read(
    also: tuple[str, list[Any]] | None = None,
) -> tuple[list[CountRow], int, list[tuple[str, str]]]:
    counts = f"SELECT 'c', {_KEY}, SUM(n), COUNT(*) FROM {COUNTS} GROUP BY {_KEY}"  # noqa: S608
    params: list[Any] = []
    if also is not None:
        sql, params = also
        counts += f" UNION ALL SELECT 'x', a.*, NULL, NULL, 0, 0 FROM ({sql}) AS a"  # noqa: S608
    with connection.cursor() as cur:
        # By position: agent_id, scope, status, gateway_id (the extra rows sort anywhere).
        cur.execute(f"{counts} ORDER BY 3, 4, 5, 2", params)
        rows = cur.fetchall()
    counted = [CountRow(a, sc, st, int(n), g) for k, g, a, sc, st, n, _ in rows if k == "c" and n]
    extra = [(str(g), str(a)) for k, g, a, *_rest in rows if k == "x"]
    return counted, sum(int(r[6]) for r in rows), extra


def receipt_counts() -> list[CountRow]:
    """Every (gateway, agent, scope, status) with its exact number of receipts (zero rows
    left out): every gateway's, or the one an edge chose (``sessions_app.gateways``)."""
    return receipt_counts_and(None)[0]


def receipt_counts_and(
    also: tuple[str, list[Any]] | None,
) -> tuple[list[CountRow], list[tuple[str, str]]]:
    """:func:`receipt_counts`, and the rows of one more read of two columns (``also``: its SQL
    and parameters) in the same statement, for a reader that keeps a query budget: the fleet,
    ``/metrics`` and the alerts read health's hash-mismatch probe so."""
    rows, stored, extra = _read(also)
    if stored > FOLD_AT:
        fold_counts()
    scope = gateway_scope()
    return (rows if scope is None else [r for r in rows if r.gateway_id == scope]), extra


def fold_counts() -> int:
    """Sum the PostgreSQL delta rows into one row per key; returns the rows folded away.

    Safe beside running writers: the DELETE sees only committed deltas, and the sums it
    re-inserts are exactly what it deleted. On SQLite it only drops rows that reached zero.
    """
    try:
        with transaction.atomic(), connection.cursor() as cur:
            if connection.vendor != "postgresql":
                cur.execute(f"DELETE FROM {COUNTS} WHERE n = 0")  # noqa: S608
                return cur.rowcount
            cur.execute("SELECT pg_try_advisory_xact_lock(%s)", [_FOLD_LOCK])
            if not cur.fetchone()[0]:
                return 0  # another process is folding right now
            cur.execute(
                f"WITH gone AS (DELETE FROM {COUNTS} RETURNING {_KEY}, n), "  # noqa: S608
                f"kept AS (INSERT INTO {COUNTS} ({_KEY}, n) "
                f"SELECT {_KEY}, SUM(n) FROM gone "
                f"GROUP BY {_KEY} HAVING SUM(n) <> 0 RETURNING 1) "
                "SELECT (SELECT COUNT(*) FROM gone) - (SELECT COUNT(*) FROM kept)"
            )
            return int(cur.fetchone()[0])
    except DatabaseError:
        # A reader must still answer (its counts are exact without folding); the next
        # fold tries again.
        logger.exception("folding receipt counts failed")
        return 0


def recompute() -> dict[tuple[str, str, str, str], int]:
    """The counts straight from the receipts table (a full scan: for checks, not pages),
    keyed (agent, scope, status, gateway)."""
    with connection.cursor() as cur:
        cur.execute(f"SELECT {_KEY}, COUNT(*) FROM {T} GROUP BY {_KEY}")  # noqa: S608
        return {(a, sc, st, g): int(n) for g, a, sc, st, n in cur.fetchall()}


@dataclass(frozen=True)
class Drift:
    agent_id: str
    scope: str
    status: str
    gateway_id: str
    stored: int
    actual: int


def find_drift() -> list[Drift]:
    """Keys whose stored count differs from the receipts table, read in one snapshot."""
    snapshot = connection.vendor == "postgresql" and not connection.in_atomic_block
    with transaction.atomic():
        if snapshot:  # both reads see one snapshot (SQLite's transaction already does)
            with connection.cursor() as cur:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        stored = {(r.agent_id, r.scope, r.status, r.gateway_id): r.count for r in _read()[0]}
        actual = recompute()
    return [
        Drift(*key, stored=stored.get(key, 0), actual=actual.get(key, 0))
        for key in sorted(set(stored) | set(actual))
        if stored.get(key, 0) != actual.get(key, 0)
    ]


def rebuild_counts() -> None:
    """Replace the stored counts by a recount, with writers held off for the duration."""
    with transaction.atomic(), connection.cursor() as cur:
        for sql in lock_writers(connection.vendor):
            cur.execute(sql)
        cur.execute(f"DELETE FROM {COUNTS}")  # noqa: S608
        cur.execute(
            f"INSERT INTO {COUNTS} ({_KEY}, n) "  # noqa: S608
            f"SELECT {_KEY}, COUNT(*) FROM {T} GROUP BY {_KEY}"
        )


# --- sums the pages need --------------------------------------------------------------------


def per_status(
    rows: Iterable[CountRow],
    *,
    agent: str | None = None,
    scopes: Iterable[str] = (),
    statuses: Iterable[str] = (),
    gateway: str | None = None,
) -> dict[str, int]:
    """Exact receipts per status among ``rows`` matching the agent, scopes, statuses and
    gateway (every gateway when None)."""
    scope_set, status_set = set(scopes), set(statuses)
    out: dict[str, int] = {}
    for row in rows:
        if agent is not None and row.agent_id != agent:
            continue
        if gateway is not None and row.gateway_id != gateway:
            continue
        if scope_set and row.scope not in scope_set:
            continue
        if status_set and row.status not in status_set:
            continue
        out[row.status] = out.get(row.status, 0) + row.count
    return out


def per_column(rows: Iterable[CountRow], column: str) -> list[tuple[str, int]]:
    """``(value, count)`` per distinct ``column`` (scope, agent_id, status or gateway_id),
    largest first."""
    if column not in {"scope", "agent_id", "status", "gateway_id"}:
        raise ValueError(f"cannot group receipts by {column!r}")
    totals: dict[str, int] = {}
    for row in rows:
        value = getattr(row, column)
        totals[value] = totals.get(value, 0) + row.count
    return sorted(totals.items(), key=lambda item: (-item[1], item[0]))
