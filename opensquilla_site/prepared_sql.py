"""Prepared statements on Django's connection, for the few fixed statements on hot paths.

Django binds parameters on the client and never prepares, so PostgreSQL plans every query
afresh: for a fixed statement with several joins the planning is most of its time (the API
token lookup: 1.0 ms planning, 0.06 ms execution). ``cursor()`` hands out a server-side-binding
psycopg cursor on Django's own connection (same transaction, same error translation) and
``execute`` prepares the statement once per connection. On SQLite the raw sqlite3 cursor
under Django's, skipping the per-call placeholder rewrite.

Used by the ledger's hand-written SQL (``receipts_app.ledger.fastsql``) and the token lookup
(``opensquilla_site.tokens``).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cache, lru_cache
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction

_EXPLICIT_PREPARE_ONLY = 2**31 - 1


@cache
def is_postgres() -> bool:
    # A process talks to one database vendor for its whole life; asking Django's connection
    # proxy each time cost a context-local lookup per statement (~5 % of a SQLite write).
    return connections[DEFAULT_DB_ALIAS].vendor == "postgresql"


@lru_cache(maxsize=512)
def _qmark(sql: str) -> str:
    # What Django's SQLite cursor does to every query (our SQL has no literal "%"), done once.
    return sql.replace("%s", "?")


@contextmanager
def cursor() -> Iterator[Any]:
    """A cursor for these statements, with Django's error translation (IntegrityError, …).

    PostgreSQL: a server-side-binding psycopg cursor on Django's connection, so statements can
    be prepared (Django's own cursors bind on the client and never prepare). SQLite: the
    sqlite3 cursor under Django's, so ``execute`` skips the per-call placeholder rewrite.
    """
    db = connections[DEFAULT_DB_ALIAS]  # one context-local lookup, not one per attribute
    if not is_postgres():
        with db.cursor() as wrapper, db.wrap_database_errors:
            yield wrapper.cursor
        return
    import psycopg

    db.ensure_connection()
    db.validate_no_broken_transaction()
    pg = db.connection
    if pg.prepare_threshold is None:
        # Django connects with prepared statements off (prepare_threshold=None), and psycopg
        # then ignores prepare=True. A threshold no query reaches turns on only the explicit
        # preparing of these fixed statements; Django's own queries stay unprepared.
        pg.prepare_threshold = _EXPLICIT_PREPARE_ONLY
    with db.wrap_database_errors, psycopg.Cursor(pg) as cur:
        yield cur


def execute(cur: Any, sql: str, params: Sequence[Any]) -> None:
    if not connection.queries_logged:  # the hot path: no timing, no bookkeeping
        _run(cur, sql, params)
        return
    # DEBUG, or a test's CaptureQueriesContext: log it as Django's own cursors do, so query
    # counts and the debug log see these statements too.
    start = time.monotonic()
    try:
        _run(cur, sql, params)
    finally:
        connection.queries_log.append(
            {"sql": f"{sql} -- params {list(params)!r}", "time": f"{time.monotonic() - start:.3f}"}
        )


def _run(cur: Any, sql: str, params: Sequence[Any]) -> None:
    if is_postgres():
        cur.execute(sql, params, prepare=True)
    else:
        sqlite3.Cursor.execute(cur, _qmark(sql), params)


@contextmanager
def write_transaction() -> Iterator[None]:
    """The transaction of one short ledger write (a few statements through ``execute``).

    Inside a caller's ``atomic`` block it is that block's transaction; on PostgreSQL, or
    whenever Django is not in autocommit, it is ``transaction.atomic()``. On SQLite in
    autocommit (every API call and task) it is ``BEGIN IMMEDIATE`` … ``COMMIT`` on the raw
    connection: the same lock and durability as Django's ``atomic`` with ``transaction_mode``
    IMMEDIATE, without its bookkeeping (two autocommit switches and the savepoint state, about
    a tenth of a single-row write; docs/PERFORMANCE.md). Code inside must not register
    ``transaction.on_commit`` hooks: outside an atomic block Django runs them at once.
    """
    db = connections[DEFAULT_DB_ALIAS]
    if is_postgres() or db.in_atomic_block or not db.get_autocommit():
        with transaction.atomic():
            yield
        return
    raw = db.connection  # get_autocommit() connected
    with db.wrap_database_errors:
        raw.execute("BEGIN IMMEDIATE")
    try:
        yield
        with db.wrap_database_errors:
            raw.execute("COMMIT")
    except BaseException:
        if raw.in_transaction:
            raw.execute("ROLLBACK")
        raise
