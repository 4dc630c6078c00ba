"""A stand-in OpenSquilla gateway database for the mirror tests, in the 0.5.x shape.

Built from the schema upstream 0.5.x creates (docs/UPSTREAM.md): the three tables the mirror
reads, with the columns later releases added (``sessions.derived_title``, ``workspace_id``,
``collaboration_mode``; ``transcript_entries.turn_context``), WAL mode, and 0.5.x's session
delete that purges the key's receipts. Writes stamp ``updated_at`` like upstream (every write
bumps it). Only the behaviour the mirror observes is reproduced, not upstream's code.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

SCHEMA_05 = (
    """CREATE TABLE sessions (
        session_key TEXT PRIMARY KEY, session_id TEXT NOT NULL,
        created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
        status TEXT NOT NULL DEFAULT 'running', chat_type TEXT NOT NULL DEFAULT 'unknown',
        collaboration_mode TEXT NOT NULL DEFAULT 'default',
        collaboration_revision INTEGER NOT NULL DEFAULT 0, derived_title TEXT,
        workspace_id TEXT, agent_id TEXT NOT NULL DEFAULT 'main',
        schema_version INTEGER NOT NULL DEFAULT 1, epoch INTEGER NOT NULL DEFAULT 0)""",
    """CREATE TABLE transcript_entries (
        id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL,
        session_key TEXT NOT NULL, message_id TEXT NOT NULL, role TEXT NOT NULL,
        content TEXT, tool_calls TEXT, tool_call_id TEXT, reasoning_content TEXT,
        turn_usage TEXT, turn_context TEXT, created_at INTEGER NOT NULL, token_count INTEGER,
        provenance_kind TEXT, schema_version INTEGER NOT NULL DEFAULT 1)""",
    """CREATE TABLE memory_durable_receipts (
        receipt_id TEXT PRIMARY KEY, session_key TEXT NOT NULL, session_id TEXT NOT NULL,
        turn_id TEXT, scope TEXT NOT NULL, source_path TEXT, target_path TEXT,
        content_hash TEXT, coverage_turn_id TEXT, coverage_hash TEXT,
        coverage_entry_count INTEGER, idempotency_key TEXT NOT NULL UNIQUE,
        status TEXT NOT NULL, reason TEXT, attempt_count INTEGER NOT NULL DEFAULT 0,
        next_retry_at_ms INTEGER, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
        schema_version INTEGER NOT NULL DEFAULT 1)""",
    "CREATE TABLE turn_ingress_receipts (id TEXT PRIMARY KEY, accepted_session_key TEXT)",
)

GROUP_SENDER_KEY = "agent:ops:telegram:group:-100123:sender:42"
GUEST_KEY = f"agent:support:webchat:guest:{'ab' * 32}:tab-1"


class FakeGateway:
    """Writes a 0.5.x-shaped sessions.db the way the gateway does (one commit per write)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        fresh = not path.exists()
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        if fresh:
            for statement in SCHEMA_05:
                self.conn.execute(statement)
        self._last = 0

    def close(self) -> None:
        self.conn.close()

    def stamp(self) -> int:
        # Strictly increasing, like wall-clock stamps of writes that are milliseconds apart.
        self._last = max(int(time.time() * 1000), self._last + 1)
        return self._last

    def add_session(self, key: str, *, epoch: int = 0) -> str:
        session_id = str(uuid.uuid4())
        now = self.stamp()
        agent = key.split(":")[1] if key.startswith("agent:") else "main"
        self.conn.execute(
            "INSERT INTO sessions (session_key, session_id, created_at, updated_at, agent_id, "
            "epoch, derived_title) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (key, session_id, now, now, agent, epoch, "a title"),
        )
        return session_id

    def session_id(self, key: str) -> str:
        return self.conn.execute(
            "SELECT session_id FROM sessions WHERE session_key = ?", (key,)
        ).fetchone()[0]

    def add_entry(self, key: str, content: str, role: str = "user") -> int:
        cursor = self.conn.execute(
            "INSERT INTO transcript_entries (session_id, session_key, message_id, role, content, "
            "turn_context, created_at) VALUES (?, ?, ?, ?, ?, '{}', ?)",
            (self.session_id(key), key, str(uuid.uuid4()), role, content, self.stamp()),
        )
        return int(cursor.lastrowid or 0)

    def add_receipt(self, key: str, *, status: str = "checkpoint_saved", **fields: Any) -> dict:
        now = self.stamp()
        turn = fields.pop("turn_id", f"maintenance_{uuid.uuid4().hex}")
        values = {
            "receipt_id": str(uuid.uuid4()),
            "session_key": key,
            "session_id": self.session_id(key),
            "turn_id": turn,
            "scope": "checkpoint",
            "idempotency_key": f"checkpoint:{key}:{turn}",
            "status": status,
            "created_at": now,
            "updated_at": now,
            **fields,
        }
        names = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        self.conn.execute(
            f"INSERT INTO memory_durable_receipts ({names}) VALUES ({marks})",  # noqa: S608
            list(values.values()),
        )
        return values

    def update_receipt(self, receipt_id: str, **fields: Any) -> int:
        fields["updated_at"] = self.stamp()
        sets = ", ".join(f"{name} = ?" for name in fields)
        self.conn.execute(
            f"UPDATE memory_durable_receipts SET {sets} WHERE receipt_id = ?",  # noqa: S608
            [*fields.values(), receipt_id],
        )
        return fields["updated_at"]

    def delete_session(self, key: str) -> None:
        """0.5.x: the session, its transcript and its receipts go in one transaction."""
        session_id = self.session_id(key)
        self.conn.execute("BEGIN")
        self.conn.execute("DELETE FROM transcript_entries WHERE session_id = ?", (session_id,))
        self.conn.execute("DELETE FROM memory_durable_receipts WHERE session_key = ?", (key,))
        self.conn.execute("DELETE FROM sessions WHERE session_key = ?", (key,))
        self.conn.execute("COMMIT")

    def empty_receipts(self) -> None:
        self.conn.execute("DELETE FROM memory_durable_receipts")
