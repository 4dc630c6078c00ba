"""A gateway's own answer to "is this session covered?", read from its ``sessions.db``.

Upstream's exact coverage lookup (docs/UPSTREAM.md#what-gates-destructive-operations) run on
the gateway's file with the gateway's own entry ids: a ``checkpoint_saved`` receipt of the
session's live generation whose coverage triple (``through-<max id>``, the hash over the
entries with their ids, the count) is the transcript's. What the console says about a
gateway's session must be this.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from receipts_app.checkpoint import checkpoint_coverage_hash, checkpoint_turn_id
from sessions_app.keys import canonicalize_session_key


def own_coverage(db: Path) -> dict[str, bool]:
    """Per canonical session key: covered in the gateway's own ledger."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        out: dict[str, bool] = {}
        for session in conn.execute("SELECT session_key, session_id FROM sessions"):
            entries = [
                {**dict(row), "tool_calls": json.loads(row["tool_calls"] or "null")}
                for row in conn.execute(
                    "SELECT id, role, content, tool_calls, tool_call_id, reasoning_content "
                    "FROM transcript_entries WHERE session_id = ? ORDER BY created_at, id",
                    (session["session_id"],),
                )
            ]
            found = (
                entries
                and conn.execute(
                    "SELECT 1 FROM memory_durable_receipts WHERE session_id = ? AND scope = "
                    "'checkpoint' AND status = 'checkpoint_saved' AND coverage_turn_id = ? AND "
                    "coverage_hash = ? AND coverage_entry_count = ?",
                    (
                        session["session_id"],
                        checkpoint_turn_id(entries),
                        checkpoint_coverage_hash(entries),
                        len(entries),
                    ),
                ).fetchone()
            )
            out[canonicalize_session_key(session["session_key"])] = bool(found)
        return out
    finally:
        conn.close()
