"""Upgrade a ``sessions.db`` the way OpenSquilla 0.5.5's migration V044 does, for tests.

Written from the description of upstream's ``V044__retire_legacy_memory_flush`` (PR #1688),
not from its code: in one ``BEGIN IMMEDIATE`` transaction it rebuilds
``memory_durable_receipts`` without ``target_path``, ``attempt_count`` and
``next_retry_at_ms`` (a new table, ``INSERT … SELECT`` of the kept columns, drop, rename, the
surviving indexes and triggers recreated: rowids change, ``receipt_id``, ``created_at`` and
``updated_at`` are kept), rebuilds ``session_summaries`` without ``flush_receipt_status`` the
same way, deletes every receipt of scope flush, preimage or repair, and records itself in
``_yoyo_migration`` when the file has that table. Files on disk (``memory/.raw_fallbacks``)
are left alone: so does upstream.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

MIGRATION_ID = "V044__retire_legacy_memory_flush"
DROPPED = {
    "memory_durable_receipts": ("target_path", "attempt_count", "next_retry_at_ms"),
    "session_summaries": ("flush_receipt_status",),
}
RETIRED_SCOPES = ("flush", "preimage", "repair")


def _split_top_level(body: str) -> list[str]:
    """The comma-separated parts of a CREATE TABLE body, commas inside parentheses kept."""
    parts, depth, current = [], 0, []
    for char in body:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    if "".join(current).strip():
        parts.append("".join(current).strip())
    return parts


def _first_name(part: str) -> str:
    return part.split()[0].strip('"`[]').lower()


def _rebuild(conn: sqlite3.Connection, table: str, dropped: tuple[str, ...]) -> None:
    row = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).fetchone()
    if row is None:
        return
    columns = [str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")]
    if not any(c in columns for c in dropped):
        return
    kept = [c for c in columns if c not in dropped]
    ddl = str(row[0])
    head, body = ddl[: ddl.index("(")], ddl[ddl.index("(") + 1 : ddl.rindex(")")]
    parts = [p for p in _split_top_level(body) if _first_name(p) not in dropped]
    new = f"{table}__v044"
    extras = [
        (str(sql))
        for (sql,) in conn.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name = ? AND type IN ('index', 'trigger') "
            "AND sql IS NOT NULL",
            (table,),
        )
    ]
    names = ", ".join(kept)
    conn.execute(re.sub(re.escape(table), new, head, count=1) + "(" + ", ".join(parts) + ")")
    conn.execute(f"INSERT INTO {new} ({names}) SELECT {names} FROM {table}")  # noqa: S608
    conn.execute(f"DROP TABLE {table}")
    conn.execute(f"ALTER TABLE {new} RENAME TO {table}")
    for sql in extras:
        if not any(re.search(rf"\b{c}\b", sql) for c in dropped):
            conn.execute(sql)


def apply_v044(path: Path) -> None:
    """Upgrade the file at ``path`` in place, as a gateway starting 0.5.5 would."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        for table, dropped in DROPPED.items():
            _rebuild(conn, table, dropped)
        marks = ", ".join("?" for _ in RETIRED_SCOPES)
        conn.execute(
            f"DELETE FROM memory_durable_receipts WHERE scope IN ({marks})",  # noqa: S608
            RETIRED_SCOPES,
        )
        has_yoyo = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_yoyo_migration'"
        ).fetchone()
        if has_yoyo:
            cols = [str(r[1]) for r in conn.execute("PRAGMA table_info(_yoyo_migration)")]
            values = {"migration_id": MIGRATION_ID, "migration_hash": "v044-test"}
            values = {k: v for k, v in values.items() if k in cols}
            conn.execute(
                f"INSERT INTO _yoyo_migration ({', '.join(values)}) "  # noqa: S608
                f"VALUES ({', '.join('?' for _ in values)})",
                list(values.values()),
            )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    finally:
        conn.close()
