"""Hand-written SQL for the ledger's hot paths: single-row upsert and update, the exact coverage
lookup and the bulk upsert (docs/PERFORMANCE.md, "Targets missed").

Why raw SQL: through the ORM an upsert was five statements (prior read, ``bulk_create``, re-read,
audit insert, plus BEGIN/COMMIT), each compiled per call. Here every statement is built once per
backend from the model's metadata, values stay parameters, and rows come back through
``RETURNING`` and ``Model.from_db``.

- PostgreSQL: one statement per operation. The prior status is read by a sub-select in
  ``RETURNING`` (upsert; every part of a statement sees the pre-statement snapshot) or a
  ``FOR UPDATE`` sub-select joined into the ``UPDATE`` (update; exact under concurrency, as
  the ORM version's ``SELECT … FOR UPDATE`` was), and the ``status_change`` audit row is
  inserted by a data-modifying CTE of the same statement. Statements go through a
  server-side-binding psycopg cursor and are prepared, so the server parses them once per
  connection.
- SQLite (≥ 3.35 for ``RETURNING``): a cheap prior read, ``INSERT … ON CONFLICT … RETURNING`` /
  ``UPDATE … RETURNING`` and, when the status moved, the audit insert, in the caller's
  IMMEDIATE transaction.
"""

# Every interpolated name comes from the model metadata; every value is a bound parameter.
# ruff: noqa: S608

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from functools import cache, lru_cache
from typing import Any

from django.db import connection
from django.db.models import Field

from opensquilla_site.prepared_sql import cursor, execute, is_postgres

from ..audit import current_actor
from ..models import MemoryDurableReceipt, ReceiptEvent
from .columns import CONFLICT_TARGET, CONFLICT_UPDATE_FIELDS, COVERAGE_FILTERS, WRITE_FIELDS

T = MemoryDurableReceipt._meta.db_table
EV = ReceiptEvent._meta.db_table
# Every concrete column, in the model's order: what RETURNING/SELECT give to ``from_db``.
READ_COLUMNS: tuple[str, ...] = tuple(f.attname for f in MemoryDurableReceipt._meta.concrete_fields)
_READ = ", ".join(READ_COLUMNS)
_READ_AT = {name: at for at, name in enumerate(READ_COLUMNS)}
_EVENT_COLUMNS = (
    "receipt_id, session_key, gateway_id, created_at, actor, surface, action, from_status, "
    "to_status, outcome, reason, plan_id, details"
)
_UPSERT_DETAILS = json.dumps({"via": "upsert"})
_UPDATE_DETAILS = json.dumps({})


def _field(name: str) -> Field[Any, Any]:
    field = MemoryDurableReceipt._meta.get_field(name)
    assert isinstance(field, Field)
    return field


_WRITE_FIELD_OBJECTS = tuple(_field(name) for name in WRITE_FIELDS)
_INT_TYPES = ("IntegerField", "BigIntegerField", "BigAutoField")


def _python_type(field: Field[Any, Any]) -> type:
    return int if field.get_internal_type() in _INT_TYPES else str


_WRITE_TYPES = tuple(_python_type(f) for f in _WRITE_FIELD_OBJECTS)


def prep(field: Field[Any, Any], value: Any, expected: type) -> Any:
    """The value the ORM would send: plain str/int/None pass through untouched (the hot case);
    anything else is converted by the field exactly as a model save would."""
    if value is None or type(value) is expected:
        return value
    return field.get_db_prep_save(value, connection)


def write_values(values: dict[str, Any]) -> list[Any]:
    return [
        prep(field, values[field.attname], kind)
        for field, kind in zip(_WRITE_FIELD_OBJECTS, _WRITE_TYPES, strict=True)
    ]


def to_model(row: Sequence[Any]) -> MemoryDurableReceipt:
    return MemoryDurableReceipt.from_db(connection.alias, READ_COLUMNS, row[: len(READ_COLUMNS)])


def _actor_params() -> list[Any]:
    who = current_actor()
    return [who.name[:150], who.surface]


# --- upsert ---------------------------------------------------------------------------------

_INSERT = (
    f"INSERT INTO {T} AS r ({', '.join(WRITE_FIELDS)}) "
    f"VALUES ({', '.join(['%s'] * len(WRITE_FIELDS))}) "
    f"ON CONFLICT ({CONFLICT_TARGET}) DO UPDATE SET "
    + ", ".join(f"{c} = EXCLUDED.{c}" for c in CONFLICT_UPDATE_FIELDS)
)
_PG_UPSERT = (
    f"WITH up AS ({_INSERT} RETURNING {', '.join('r.' + c for c in READ_COLUMNS)}, "
    # Sees the row as it was before this statement: the status the upsert replaced.
    f"(SELECT p.status FROM {T} p WHERE p.gateway_id = %s AND p.idempotency_key = %s) "
    f"AS prior_status), "
    f"ev AS (INSERT INTO {EV} ({_EVENT_COLUMNS}) "
    f"SELECT receipt_id, session_key, gateway_id, %s, %s, %s, 'status_change', prior_status, "
    f"status, NULL, reason, NULL, %s::jsonb FROM up WHERE prior_status <> status) "
    f"SELECT {_READ} FROM up"
)
_SQLITE_UPSERT = f"{_INSERT} RETURNING {_READ}"
_SQLITE_PRIOR_BY_KEY = f"SELECT status FROM {T} WHERE gateway_id = %s AND idempotency_key = %s"
_SQLITE_PRIOR_BY_ID = f"SELECT status FROM {T} WHERE receipt_id = %s"
_EVENT_INSERT = (
    f"INSERT INTO {EV} ({_EVENT_COLUMNS}) "
    f"VALUES (%s, %s, %s, %s, %s, %s, 'status_change', %s, %s, NULL, %s, NULL, %s)"
)


def prior_key(values: dict[str, Any]) -> list[Any]:
    """The parameters naming a row by its key: the prior-status look-up's (SQLite) and the
    upsert's sub-select's (PostgreSQL)."""
    return [values["gateway_id"], values["idempotency_key"]]


def pg_upsert_params(values: dict[str, Any], stamp: int, actor: list[Any]) -> list[Any]:
    """The parameters of ``_PG_UPSERT``, in its order (``bench/write_rounds.py`` uses them)."""
    return [*write_values(values), *prior_key(values), stamp, *actor, _UPSERT_DETAILS]


def pg_update_params(
    receipt_id: str, values: list[Any], stamp: int, actor: list[Any], *, audited: bool
) -> list[Any]:
    """The parameters of ``_update_sql(…, "postgresql", audited)``, in its order."""
    extra = [stamp, *actor, _UPDATE_DETAILS] if audited else []
    return [receipt_id, *values, *extra]


def event_params(
    row: Sequence[Any], prior: str, stamp: int, actor: list[Any], details: str
) -> list[Any]:
    """The parameters of ``_EVENT_INSERT`` for a stored row (``READ_COLUMNS`` order)."""
    at = _READ_AT
    return [
        row[at["receipt_id"]],
        row[at["session_key"]],
        row[at["gateway_id"]],
        stamp,
        *actor,
        prior,
        row[at["status"]],
        row[at["reason"]],
        details,
    ]


def upsert(values: dict[str, Any], stamp: int) -> MemoryDurableReceipt:
    """One row by (gateway, ``idempotency_key``); records a status_change event when the
    status moved.

    Runs in the caller's transaction when there is one; on PostgreSQL the statement is atomic
    on its own.
    """
    with cursor() as cur:
        if is_postgres():
            execute(cur, _PG_UPSERT, pg_upsert_params(values, stamp, _actor_params()))
            return to_model(cur.fetchone())
        execute(cur, _SQLITE_PRIOR_BY_KEY, prior_key(values))
        prior = cur.fetchone()
        execute(cur, _SQLITE_UPSERT, write_values(values))
        found = cur.fetchone()
        if prior is not None and prior[0] != found[_READ_AT["status"]]:
            _sqlite_event(cur, found, prior[0], stamp, _UPSERT_DETAILS)
        return to_model(found)


def _sqlite_event(cur: Any, row: Sequence[Any], prior: str, stamp: int, details: str) -> None:
    """The status_change event of a stored row (``READ_COLUMNS`` order), on SQLite."""
    execute(cur, _EVENT_INSERT, event_params(row, prior, stamp, _actor_params(), details))


# --- update ---------------------------------------------------------------------------------


@lru_cache(maxsize=256)  # one per combination of updated columns actually used
def _update_sql(names: tuple[str, ...], vendor: str, audited: bool) -> str:
    sets = ", ".join(f"{n} = %s" for n in names)
    if vendor != "postgresql":
        return f"UPDATE {T} SET {sets} WHERE receipt_id = %s RETURNING {_READ}"
    sql = (
        # The locked sub-select waits for a concurrent writer and then reads its committed
        # status, so the audited "from" status is exact.
        f"WITH prev AS (SELECT id, status FROM {T} WHERE receipt_id = %s FOR UPDATE), "
        f"up AS (UPDATE {T} AS r SET {sets} FROM prev WHERE r.id = prev.id "
        f"RETURNING {', '.join('r.' + c for c in READ_COLUMNS)}, prev.status AS prior_status)"
    )
    if audited:
        sql += (
            f", ev AS (INSERT INTO {EV} ({_EVENT_COLUMNS}) "
            f"SELECT receipt_id, session_key, gateway_id, %s, %s, %s, 'status_change', "
            f"prior_status, status, NULL, reason, NULL, %s::jsonb FROM up "
            f"WHERE prior_status <> status)"
        )
    return sql + f" SELECT {_READ} FROM up"


def update(receipt_id: str, fields: dict[str, Any], stamp: int) -> MemoryDurableReceipt | None:
    """Set ``fields`` on one row; None when no row has ``receipt_id``.

    A status_change event is recorded when ``status`` is among the fields and moved.
    """
    names = tuple(fields)
    values = [prep(_field(n), fields[n], _python_type(_field(n))) for n in names]
    audited = "status" in fields
    sql = _update_sql(names, connection.vendor, audited)
    with cursor() as cur:
        if is_postgres():
            params = pg_update_params(receipt_id, values, stamp, _actor_params(), audited=audited)
            execute(cur, sql, params)
            found = cur.fetchone()
            return None if found is None else to_model(found)
        execute(cur, _SQLITE_PRIOR_BY_ID, [receipt_id])
        prior = cur.fetchone()
        if prior is None:
            return None
        execute(cur, sql, [*values, receipt_id])
        found = cur.fetchone()
        if audited and prior[0] != found[_READ_AT["status"]]:
            _sqlite_event(cur, found, prior[0], stamp, _UPDATE_DETAILS)
        return to_model(found)


# --- exact coverage lookup ------------------------------------------------------------------

_COVERAGE = (
    f"SELECT {_READ} FROM {T} WHERE "
    + " AND ".join(f"{c} = %s" for c in COVERAGE_FILTERS)
    + " ORDER BY created_at, id LIMIT %s"
)
_COVERAGE_FIELDS = tuple((_field(c), _python_type(_field(c))) for c in COVERAGE_FILTERS)


def coverage_lookup(filters: Sequence[Any], limit: int) -> list[MemoryDurableReceipt]:
    """Every coverage filter given, equality on each: one probe of ``idx_mdr_coverage``."""
    params = [
        prep(field, value, kind)
        for (field, kind), value in zip(_COVERAGE_FIELDS, filters, strict=True)
    ]
    with cursor() as cur:
        execute(cur, _COVERAGE, [*params, limit])
        return [to_model(row) for row in cur.fetchall()]


# --- bulk upsert ----------------------------------------------------------------------------


@cache
def _pg_bulk_sql() -> str:
    # %b: the arrays travel in binary, with no text quoting or escaping of 1,000 values each.
    arrays = ", ".join(f"%b::{f.db_type(connection)}[]" for f in _WRITE_FIELD_OBJECTS)
    return (
        f"INSERT INTO {T} AS r ({', '.join(WRITE_FIELDS)}) SELECT * FROM unnest({arrays}) "
        f"ON CONFLICT ({CONFLICT_TARGET}) DO UPDATE SET "
        + ", ".join(f"{c} = EXCLUDED.{c}" for c in CONFLICT_UPDATE_FIELDS)
        + f" RETURNING {', '.join('r.' + c for c in READ_COLUMNS)}"
    )


@lru_cache(maxsize=8)  # full batches share one; only the last chunk varies
def _sqlite_bulk_sql(rows: int) -> str:
    one = f"({', '.join(['%s'] * len(WRITE_FIELDS))})"
    return (
        f"INSERT INTO {T} ({', '.join(WRITE_FIELDS)}) VALUES {', '.join([one] * rows)} "
        f"ON CONFLICT ({CONFLICT_TARGET}) DO UPDATE SET "
        + ", ".join(f"{c} = excluded.{c}" for c in CONFLICT_UPDATE_FIELDS)
        + f" RETURNING {_READ}"
    )


def _sqlite_rows_per_statement() -> int:
    connection.ensure_connection()
    try:
        limit = connection.connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    except AttributeError:  # pragma: no cover - Python < 3.11
        limit = 999
    return max(1, min(500, limit // len(WRITE_FIELDS)))


def bulk_upsert(rows: Sequence[dict[str, Any]]) -> list[MemoryDurableReceipt]:
    """Upsert rows with distinct keys; returns the stored rows (in no particular order).

    PostgreSQL: one ``INSERT … SELECT FROM unnest(<one array per column>)`` for the whole
    batch, parameters bound server-side. SQLite: multi-row ``VALUES`` statements.
    """
    if not rows:
        return []
    prepared = [write_values(row) for row in rows]
    stored: list[MemoryDurableReceipt] = []
    with cursor() as cur:
        if is_postgres():
            columns = [list(col) for col in zip(*prepared, strict=True)]
            cur.execute(_pg_bulk_sql(), columns)
            return [to_model(r) for r in cur.fetchall()]
        step = _sqlite_rows_per_statement()
        for start in range(0, len(prepared), step):
            chunk = prepared[start : start + step]
            execute(cur, _sqlite_bulk_sql(len(chunk)), [v for row in chunk for v in row])
            stored.extend(to_model(r) for r in cur.fetchall())
    return stored
