"""Which OpenSquilla schema a ``sessions.db`` is at (docs/IMPORT.md#schema-versions).

Upstream records its schema two ways, and a file may carry either or neither:
- ``SessionStorage.SCHEMA_VERSION``, a number the code bumps with every widening (7 at
  0.3.0, 21 at 0.5.3, 25 at HEAD). It is never written to the file, so it is read back here
  from what each version added: the newest marker present wins;
- yoyo's ``_yoyo_migration`` table, one row per applied ``migrations/V…`` file, written when
  a gateway boots (a file written by the storage alone, like our 0.3.0 golden copy, has none).

Both are read with plain ``PRAGMA``/``SELECT`` on a connection the caller owns: nothing is
written and no row data is touched.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

# (version, table, column or None): the newest version whose marker is present is the
# file's version. Taken from upstream's storage (the comment above SCHEMA_VERSION) and its
# migrations; 7 is the oldest release this product imports (0.3.0).
STORAGE_VERSION_MARKERS: tuple[tuple[int, str, str | None], ...] = (
    (2, "sessions", "epoch"),
    (3, "transcript_entries", "reasoning_content"),
    (4, "transcript_entries", "turn_usage"),
    (6, "session_context_states", None),
    (7, "compacted_transcript_entries", None),
    (8, "sessions", "derived_title"),
    (9, "turn_ingress_receipts", None),
    (10, "usage_events", None),
    (11, "usage_item_billing_receipts", None),
    (12, "project_workspaces", None),
    (13, "runtime_preferences", None),
    (14, "sessions", "collaboration_mode"),
    (15, "plan_revisions", None),
    (16, "plan_runs", None),
    (17, "meta_control_intents", None),
    (18, "meta_launch_drafts", None),
    (19, "session_goals", None),
    (20, "session_goals", "source_user_message_id"),
    (21, "pending_chat_inputs", None),
    (22, "artifact_documents", None),
    (23, "artifact_prompt_annotations", None),
    (24, "artifact_mutation_attempts", None),
    (25, "sessions", "model_routing_mode"),
)
# The newest schema this product was checked against (upstream HEAD 4e3ee640a): a file
# with a later migration still imports (only known columns are read), with a warning.
KNOWN_LATEST_MIGRATION = 40
# The newest migration a release this product was checked against ships with: a file at it
# names its OpenSquilla version (a gateway record's ``opensquilla_version``).
KNOWN_RELEASES = {"V014__meta_skill_run_steps_allow_user_input": "0.3.0"}
# 0.5.5 (PR #1688) retired the flush and repair pipelines: its migration V044 rebuilds
# ``memory_durable_receipts`` without these columns and deletes every flush, pre-image and
# repair receipt. Either sign says the ledger is retired: the migration's row (a gateway
# that booted) or the table's shape (a file upgraded by the storage alone).
RETIRE_MIGRATION = "V044__retire_legacy_memory_flush"
RETIRED_RECEIPT_COLUMNS = ("target_path", "attempt_count", "next_retry_at_ms")


@dataclass(frozen=True)
class SchemaVersion:
    """A source file's schema: the storage version and the yoyo migrations applied."""

    storage_version: int
    migrations: tuple[str, ...] = ()
    # The V044 shape: no flush or repair pipeline upstream any more (0.5.5+).
    ledger_retired: bool = False

    @property
    def latest_migration(self) -> str | None:
        return self.migrations[-1] if self.migrations else None

    @property
    def newer_than_known(self) -> bool:
        """A file migrated by a release after the newest one this product was checked against."""
        return any(_migration_number(m) > KNOWN_LATEST_MIGRATION for m in self.migrations)

    @property
    def release(self) -> str:
        """The OpenSquilla release whose newest migration the file is at ("" when unknown)."""
        return KNOWN_RELEASES.get(self.latest_migration or "", "")

    def label(self) -> str:
        """One line for a report or a page: ``25 (V040__document_resources)``."""
        latest = self.latest_migration
        text = f"{self.storage_version} ({latest})" if latest else str(self.storage_version)
        return f"{text}, ledger retired (V044)" if self.ledger_retired else text


def read_schema_version(conn: sqlite3.Connection) -> SchemaVersion:
    """The schema of the OpenSquilla database open on ``conn`` (read-only use).

    Raises ``sqlite3.DatabaseError`` when the file cannot be read; the importer turns that
    into its own error.
    """
    tables = {
        str(row[0]) for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    }
    columns: dict[str, set[str]] = {}

    def has(table: str, column: str | None) -> bool:
        if table not in tables:
            return False
        if column is None:
            return True
        if table not in columns:
            # Names come from the constant above, never from the file.
            columns[table] = {str(row[1]) for row in conn.execute(f"PRAGMA table_info({table})")}
        return column in columns[table]

    version = max(
        (v for v, table, column in STORAGE_VERSION_MARKERS if has(table, column)), default=1
    )
    migrations: tuple[str, ...] = ()
    if "_yoyo_migration" in tables:
        ids = [str(row[0]) for row in conn.execute("SELECT migration_id FROM _yoyo_migration")]
        migrations = tuple(sorted(ids, key=lambda m: (_migration_number(m), m)))
    receipts = "memory_durable_receipts"
    retired = RETIRE_MIGRATION in migrations or (
        receipts in tables and not any(has(receipts, c) for c in RETIRED_RECEIPT_COLUMNS)
    )
    return SchemaVersion(storage_version=version, migrations=migrations, ledger_retired=retired)


def read_schema_version_at(path: Path) -> SchemaVersion:
    """:func:`read_schema_version` of the file at ``path``, opened read-only for the call.

    For a gateway record that stores the version it last saw; raises
    ``sqlite3.DatabaseError`` for a missing or unreadable file.
    """
    if not Path(path).is_file():
        raise sqlite3.OperationalError(f"{path} is not a file")
    conn = sqlite3.connect(f"file:{Path(path).resolve().as_posix()}?mode=ro", uri=True)
    try:
        return read_schema_version(conn)
    finally:
        conn.close()


def _migration_number(migration_id: str) -> int:
    """``V036__session_model_routing`` → 36; an unexpected name sorts first."""
    head = migration_id.split("__", 1)[0].lstrip("Vv")
    return int(head) if head.isdigit() else -1
