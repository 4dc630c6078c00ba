"""Importing OpenSquilla's compaction summaries and their pre-images (optional tables).

``session_summaries`` and ``compacted_transcript_entries`` exist from 0.3.0 on, but an
older or trimmed database may lack them: then nothing is imported and nothing fails. Only
what the repair of degraded summaries needs is kept (docs/WORKERS.md).

Idempotent: a summary matches on (session_key, compaction_id), or on (session_id,
compaction_index, created_at) when it has no compaction id; a pre-image entry on
(session_id, compaction_id, original_entry_id). A summary's ``flush_receipt_status`` follows
the source unless this product already repaired it (the source keeps saying "degraded"
until upstream repairs it itself, and the repair must not be redone on every import).

A row whose ``session_key``, ``session_id`` or ``compaction_id`` holds a control character
(``opensquilla_site.identifiers``) is skipped as a session, entry or receipt row is: never
stored, counted in the report's ``compactions_skipped`` and named by its source rowid in a
``control_characters`` warning (docs/IMPORT.md).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from opensquilla_site.identifiers import control_character_problem
from sessions_app.keys import canonicalize_session_key
from sessions_app.models import CompactedTranscriptEntry, CompactionSummary

from .errors import ImportSourceError
from .report import ImportReport
from .rows import UNADDRESSABLE  # the same warning kind as the other tables' skipped rows
from .source import SourceDatabase

# The columns that name a compaction row (in keys, links, the repair's lookups).
IDENTIFIER_COLUMNS = ("session_key", "session_id", "compaction_id")

SUMMARY_COLUMNS = (
    "session_id",
    "session_key",
    "compaction_index",
    "compaction_id",
    "trigger_reason",
    "summary_text",
    "removed_count",
    "kept_count",
    "flush_receipt_status",
    "covered_through_id",
    "created_at",
)
ENTRY_COLUMNS = (
    "session_id",
    "session_key",
    "compaction_id",
    "original_entry_id",
    "message_id",
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "reasoning_content",
    "token_count",
    "created_at",
)
KEPT_LOCAL_STATUSES = frozenset({"repaired"})


def _columns(source: SourceDatabase, table: str) -> set[str] | None:
    try:
        rows = source.conn.execute(f"PRAGMA table_info({table})").fetchall()  # noqa: S608
    except sqlite3.DatabaseError as exc:
        raise ImportSourceError(f"{source.path} cannot be read: {exc}") from exc
    return {row[1] for row in rows} or None


def _rows(source: SourceDatabase, table: str, wanted: tuple[str, ...]) -> list[dict[str, Any]]:
    present = _columns(source, table)
    if present is None:
        return []
    # Column names come from the constants above, never from the source file.
    select = ", ".join(c if c in present else f"NULL AS {c}" for c in wanted)
    names = ("rowid", *wanted)
    try:
        cursor = source.conn.execute(
            f"SELECT rowid, {select} FROM {table} ORDER BY rowid"  # noqa: S608
        )
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    except sqlite3.DatabaseError as exc:
        raise ImportSourceError(f"{source.path} cannot be read: {exc}") from exc


def _tool_calls(value: Any, where: str) -> Any:
    if value is None or not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError as exc:
        raise ImportSourceError(f"{where}: tool_calls is not JSON") from exc


def _identifier_problem(row: dict[str, Any]) -> str | None:
    for name in IDENTIFIER_COLUMNS:
        value = row[name]
        if name == "session_key" and value is not None:
            value = canonicalize_session_key(value)
        problem = control_character_problem(value) if isinstance(value, str) else None
        if problem is not None:
            return f"{name} {problem}"
    return None


def _addressable(
    rows: list[dict[str, Any]], what: str, report: ImportReport | None
) -> list[dict[str, Any]]:
    """The rows whose keys and ids hold no control character; each other one is skipped,
    counted and reported with its source rowid."""
    kept = []
    for row in rows:
        problem = _identifier_problem(row)
        if problem is None:
            kept.append(row)
            continue
        if report is not None:
            report.compactions_skipped += 1
            report.warn(
                UNADDRESSABLE, f"{what} at source rowid {row['rowid']}: {problem}; not imported"
            )
    return kept


def import_compactions(
    source: SourceDatabase, report: ImportReport | None = None
) -> tuple[int, int]:
    """Import summaries and pre-image entries; returns (summaries, entries) written."""
    written_summaries = 0
    summaries = _rows(source, "session_summaries", SUMMARY_COLUMNS)
    for row in _addressable(summaries, "compaction summary", report):
        key = canonicalize_session_key(row["session_key"])
        values = {
            "session_id": str(row["session_id"] or ""),
            "session_key": key,
            "compaction_index": int(row["compaction_index"] or 0),
            "compaction_id": row["compaction_id"] or None,
            "trigger_reason": row["trigger_reason"],
            "summary_text": str(row["summary_text"] or ""),
            "removed_count": int(row["removed_count"] or 0),
            "kept_count": int(row["kept_count"] or 0),
            "flush_receipt_status": str(row["flush_receipt_status"] or "unknown"),
            "covered_through_id": int(row["covered_through_id"] or 0),
            "created_at": int(row["created_at"] or 0),
        }
        if values["compaction_id"]:
            match = {"session_key": key, "compaction_id": values["compaction_id"]}
        else:
            match = {
                "session_id": values["session_id"],
                "compaction_index": values["compaction_index"],
                "created_at": values["created_at"],
            }
        existing = CompactionSummary.objects.filter(**match).first()
        if existing is None:
            CompactionSummary.objects.create(**values)
            written_summaries += 1
            continue
        if existing.flush_receipt_status in KEPT_LOCAL_STATUSES:
            values["flush_receipt_status"] = existing.flush_receipt_status
        changed = {k: v for k, v in values.items() if getattr(existing, k) != v}
        if changed:
            CompactionSummary.objects.filter(pk=existing.pk).update(**changed)
            written_summaries += 1

    written_entries = 0
    entries = _rows(source, "compacted_transcript_entries", ENTRY_COLUMNS)
    for row in _addressable(entries, "compacted transcript entry", report):
        where = f"compacted entry {row['original_entry_id']} of {row['compaction_id']}"
        _, created = CompactedTranscriptEntry.objects.get_or_create(
            session_id=str(row["session_id"] or ""),
            compaction_id=str(row["compaction_id"] or ""),
            original_entry_id=int(row["original_entry_id"] or 0),
            defaults={
                "session_key": canonicalize_session_key(row["session_key"]),
                "message_id": str(row["message_id"] or ""),
                "role": str(row["role"] or ""),
                "content": row["content"],
                "tool_calls": _tool_calls(row["tool_calls"], where),
                "tool_call_id": row["tool_call_id"],
                "reasoning_content": row["reasoning_content"],
                "token_count": row["token_count"],
                "created_at": int(row["created_at"] or 0),
            },
        )
        written_entries += int(created)
    return written_summaries, written_entries
