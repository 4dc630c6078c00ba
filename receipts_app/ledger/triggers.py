"""The triggers that keep ``ReceiptCount`` and ``FailureInbox`` in step with the receipts table.

Triggers, not ledger code, because every write must be counted: the ledger's prebuilt SQL, the
ORM (admin, requeue, imports), raw SQL, PostgreSQL ``COPY`` and the deletes a session purge
cascades. A trigger runs inside the writing statement's transaction, so a count can never
disagree with the rows a committed transaction left behind.

- PostgreSQL: statement-level triggers with transition tables. One statement (a 1,000-row bulk
  upsert, a 1M-row COPY) appends one signed delta per (gateway, agent, scope, status) it touched, so no
  two writers ever update the same counter row (a hot row would make concurrent writers of one
  agent queue behind each other's commits). ``counts.fold_counts`` folds the deltas.
- SQLite: row-level triggers that adjust one row per key in place (writers are serialised by
  the database lock anyway, so there is no contention to avoid).

The statuses that feed the failure groups (``statuses.AT_RISK_STATUSES``) are frozen into the
SQL by the migration that installs it (0017 now); a change of that list needs a migration that
re-installs the triggers (``manage.py check_counts`` reports the drift until then).
"""

# Every interpolated name is a constant of this module or a status from statuses.py.
# ruff: noqa: S608

from __future__ import annotations

from collections.abc import Sequence

T = "receipts_app_memorydurablereceipt"
COUNTS = "receipts_app_receiptcount"
INBOX = "receipts_app_failureinbox"
GROUPS = "receipts_app_failuregroupcount"
MEMBERS = "receipts_app_failuregroupmember"
SQLITE_COUNTS_KEY = "receipt_count_key_uniq"
_INBOX_COLUMNS = "receipt_id, scope, status, reason, created_at, sign"
# What a count row is per. The migrations that installed an older key pass it (frozen there):
# each migration keeps the SQL of its own point in the history.
KEY_COLUMNS: tuple[str, ...] = ("gateway_id", "agent_id", "scope", "status")


def _in_list(statuses: Sequence[str]) -> str:
    for status in statuses:
        if "'" in status:
            raise ValueError(f"status {status!r} cannot be frozen into trigger SQL")
    return "(" + ", ".join(f"'{s}'" for s in statuses) + ")"


def postgres_functions(
    failure_statuses: Sequence[str], key: Sequence[str] = KEY_COLUMNS
) -> list[str]:
    """The trigger functions (``CREATE OR REPLACE``: a later migration re-runs them).

    Each body is one statement (the counts insert as a data-modifying CTE beside the inbox
    insert): every statement a PL/pgSQL body runs costs an executor start-up, which on a
    single-row write was a measurable share of the whole write (docs/PERFORMANCE.md).
    """
    failed = _in_list(failure_statuses)
    k = ", ".join(key)
    changed = "(o.scope, o.status, o.reason) IS DISTINCT FROM (n.scope, n.status, n.reason)"
    return [
        f"""
CREATE OR REPLACE FUNCTION osq_receipts_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  WITH counted AS (
    INSERT INTO {COUNTS} ({k}, n)
    SELECT {k}, count(*) FROM new_rows GROUP BY {k}
  )
  INSERT INTO {INBOX} ({_INBOX_COLUMNS})
  SELECT receipt_id, scope, status, reason, created_at, 1 FROM new_rows
  WHERE status IN {failed};
  RETURN NULL;
END $$""",
        f"""
CREATE OR REPLACE FUNCTION osq_receipts_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  WITH counted AS (
    INSERT INTO {COUNTS} ({k}, n)
    SELECT {k}, sum(n) FROM (
      SELECT {k}, -1 AS n FROM old_rows
      UNION ALL SELECT {k}, 1 FROM new_rows
    ) AS d GROUP BY {k} HAVING sum(n) <> 0
  )
  INSERT INTO {INBOX} ({_INBOX_COLUMNS})
  SELECT o.receipt_id, o.scope, o.status, o.reason, o.created_at, -1
  FROM old_rows o JOIN new_rows n ON n.id = o.id WHERE o.status IN {failed} AND {changed}
  UNION ALL
  SELECT n.receipt_id, n.scope, n.status, n.reason, n.created_at, 1
  FROM old_rows o JOIN new_rows n ON n.id = o.id WHERE n.status IN {failed} AND {changed};
  RETURN NULL;
END $$""",
        f"""
CREATE OR REPLACE FUNCTION osq_receipts_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  WITH counted AS (
    INSERT INTO {COUNTS} ({k}, n)
    SELECT {k}, -count(*) FROM old_rows GROUP BY {k}
  )
  INSERT INTO {INBOX} ({_INBOX_COLUMNS})
  SELECT receipt_id, scope, status, reason, created_at, -1 FROM old_rows
  WHERE status IN {failed};
  RETURN NULL;
END $$""",
        f"""
CREATE OR REPLACE FUNCTION osq_receipts_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM {COUNTS};
  DELETE FROM {INBOX};
  DELETE FROM {GROUPS};
  DELETE FROM {MEMBERS};
  RETURN NULL;
END $$""",
    ]


def postgres_install(
    failure_statuses: Sequence[str], key: Sequence[str] = KEY_COLUMNS
) -> list[str]:
    return [
        *postgres_functions(failure_statuses, key),
        f"CREATE TRIGGER osq_receipts_inserted AFTER INSERT ON {T} REFERENCING NEW TABLE AS "
        "new_rows FOR EACH STATEMENT EXECUTE FUNCTION osq_receipts_inserted()",
        f"CREATE TRIGGER osq_receipts_updated AFTER UPDATE ON {T} REFERENCING OLD TABLE AS "
        "old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION osq_receipts_updated()",
        f"CREATE TRIGGER osq_receipts_deleted AFTER DELETE ON {T} REFERENCING OLD TABLE AS "
        "old_rows FOR EACH STATEMENT EXECUTE FUNCTION osq_receipts_deleted()",
        f"CREATE TRIGGER osq_receipts_truncated AFTER TRUNCATE ON {T} "
        "FOR EACH STATEMENT EXECUTE FUNCTION osq_receipts_truncated()",
    ]


def postgres_uninstall() -> list[str]:
    out = []
    for name in ("inserted", "updated", "deleted", "truncated"):
        out.append(f"DROP TRIGGER IF EXISTS osq_receipts_{name} ON {T}")
        out.append(f"DROP FUNCTION IF EXISTS osq_receipts_{name}()")
    return out


def _sqlite_bump(row: str, delta: str, key: Sequence[str]) -> str:
    k = ", ".join(key)
    values = ", ".join(f"{row}.{c}" for c in key)
    return (
        f"INSERT INTO {COUNTS} ({k}, n) VALUES ({values}, {delta}) "
        f"ON CONFLICT ({k}) DO UPDATE SET n = n + excluded.n;"
    )


def _sqlite_inbox(row: str, sign: str, failed: str, extra: str = "") -> str:
    return (
        f"INSERT INTO {INBOX} ({_INBOX_COLUMNS}) SELECT {row}.receipt_id, {row}.scope, "
        f"{row}.status, {row}.reason, {row}.created_at, {sign} "
        f"WHERE {row}.status IN {failed}{extra};"
    )


def sqlite_install(failure_statuses: Sequence[str], key: Sequence[str] = KEY_COLUMNS) -> list[str]:
    failed = _in_list(failure_statuses)
    k = ", ".join(key)
    key_moved = " OR ".join(f"OLD.{c} IS NOT NEW.{c}" for c in key)
    group_moved = "(OLD.scope IS NOT NEW.scope OR OLD.status IS NOT NEW.status OR OLD.reason IS NOT NEW.reason)"
    return [
        f"CREATE UNIQUE INDEX IF NOT EXISTS {SQLITE_COUNTS_KEY} ON {COUNTS} ({k})",
        f"CREATE TRIGGER osq_receipts_inserted AFTER INSERT ON {T} BEGIN "
        f"{_sqlite_bump('NEW', '1', key)} {_sqlite_inbox('NEW', '1', failed)} END",
        f"CREATE TRIGGER osq_receipts_counted_update AFTER UPDATE OF {k} "
        f"ON {T} WHEN {key_moved} BEGIN "
        f"{_sqlite_bump('OLD', '-1', key)} {_sqlite_bump('NEW', '1', key)} END",
        f"CREATE TRIGGER osq_receipts_failure_update AFTER UPDATE OF scope, status, reason "
        f"ON {T} WHEN {group_moved} AND (OLD.status IN {failed} OR NEW.status IN {failed}) BEGIN "
        f"{_sqlite_inbox('OLD', '-1', failed)} {_sqlite_inbox('NEW', '1', failed)} END",
        f"CREATE TRIGGER osq_receipts_deleted AFTER DELETE ON {T} BEGIN "
        f"{_sqlite_bump('OLD', '-1', key)} {_sqlite_inbox('OLD', '-1', failed)} END",
    ]


def sqlite_uninstall() -> list[str]:
    names = ("inserted", "counted_update", "failure_update", "deleted")
    return [f"DROP TRIGGER IF EXISTS osq_receipts_{name}" for name in names] + [
        f"DROP INDEX IF EXISTS {SQLITE_COUNTS_KEY}"
    ]


def backfill(key: Sequence[str] = KEY_COLUMNS) -> list[str]:
    """Counts and inbox for the rows already in the table (run with writers locked out)."""
    k = ", ".join(key)
    return [
        f"DELETE FROM {COUNTS}",
        f"DELETE FROM {INBOX}",
        f"DELETE FROM {GROUPS}",
        f"INSERT INTO {COUNTS} ({k}, n) SELECT {k}, count(*) FROM {T} GROUP BY {k}",
    ]


def backfill_inbox(failure_statuses: Sequence[str]) -> str:
    return (
        f"INSERT INTO {INBOX} ({_INBOX_COLUMNS}) SELECT receipt_id, scope, status, reason, "
        f"created_at, 1 FROM {T} WHERE status IN {_in_list(failure_statuses)} ORDER BY id"
    )


def lock_writers(vendor: str) -> list[str]:
    """Hold writers off while counts are rebuilt (SQLite's IMMEDIATE transaction already does)."""
    if vendor == "postgresql":
        return [f"LOCK TABLE {T} IN SHARE ROW EXCLUSIVE MODE"]
    return []


def install(
    vendor: str, failure_statuses: Sequence[str], key: Sequence[str] = KEY_COLUMNS
) -> list[str]:
    if vendor == "postgresql":
        return postgres_install(failure_statuses, key)
    if vendor == "sqlite":
        return sqlite_install(failure_statuses, key)
    raise NotImplementedError(f"receipt count triggers for {vendor}")


def uninstall(vendor: str) -> list[str]:
    return postgres_uninstall() if vendor == "postgresql" else sqlite_uninstall()
