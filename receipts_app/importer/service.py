"""``import_opensquilla``: bring an OpenSquilla ``sessions.db`` and its workspace in.

Contract:
- All or nothing. Every row is written inside one transaction; a bad source (not SQLite,
  corrupt, not OpenSquilla, an unsafe receipt path, a malformed value) raises
  ``ImportSourceError`` and leaves the database as it was. Files copied before a failure are
  removed again.
- Idempotent. Sessions match on the canonical key, transcript entries on
  (session_id, message_id), receipts on ``idempotency_key``; a second run reports
  everything unchanged and writes nothing.
- Faithful. ``receipt_id``, ``created_at``, ``updated_at`` and the idempotency key are kept.
  That is why receipts bypass ``ledger.upsert_memory_durable_receipt``: the ledger stamps
  ``updated_at`` with now (upstream's upsert rule) and records one status-change event per
  row. The import writes the rows directly and records ONE summary event instead, so the
  audit timeline says "imported from <file>" rather than thousands of synthetic changes.
- Transcript entry ids are kept, because a checkpoint's coverage (``through-<max id>`` and
  the coverage hash) is computed over them: a remapped id would make every imported
  checkpoint stop covering its transcript. Only an id already taken by a different local
  entry gets a fresh one; the report counts those and names the sessions they affect.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.color import no_style
from django.db import connection, transaction

from sessions_app.keys import agent_id_for_session_key, canonicalize_session_key, normalize_agent_id
from sessions_app.models import Session, TranscriptEntry

from .. import audit
from ..ledger import LEDGER_FIELDS
from ..models import MemoryDurableReceipt
from ..statuses import CHECKPOINT_SAVED, PREIMAGE_SAVED
from .compactions import import_compactions
from .errors import ImportSourceError
from .files import copy_planned, plan_copies, remove_created, sha256_file
from .paths import CHECKPOINT_DIR, RAW_FALLBACK_DIR, check_receipt_path, is_file_path, normalise
from .report import Counts, ImportReport
from .source import SourceDatabase, SourceEntry, SourceReceipt, SourceSession

Progress = Callable[[str, int, int], None]

# Receipt columns the import compares and overwrites when the source row is newer: the
# ledger's conflict columns, minus the constant schema version.
_RECEIPT_MUTABLE = tuple(
    name
    for name in LEDGER_FIELDS
    if name not in ("receipt_id", "idempotency_key", "created_at", "schema_version")
)
_ENTRY_FIELDS = (
    "session_key",
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "reasoning_content",
    "token_count",
    "created_at",
)
# Which receipts name a file whose bytes ``content_hash`` is the sha256 of.
_HASHED_FILE_COLUMN = {CHECKPOINT_SAVED: "source_path", PREIMAGE_SAVED: "target_path"}


@dataclass
class _FileFacts:
    """What the receipts say about workspace files, gathered while importing them."""

    agents_by_path: dict[str, set[str]] = field(default_factory=dict)
    expected_hash: dict[str, set[str]] = field(default_factory=dict)


def _noop_progress(stage: str, done: int, total: int) -> None:
    return None


def import_opensquilla(
    *,
    db_path: Path,
    workspace: Path | None,
    target_workspace: Path | None = None,
    memory_workspace: str | None = None,
    progress: Progress | None = None,
) -> ImportReport:
    """Import every session, transcript entry and receipt, then the workspace files.

    ``target_workspace`` defaults to ``settings.OPENSQUILLA_CHECKPOINT_WORKSPACE``.
    Raw-fallback archives go to ``memory_workspace`` (default
    ``settings.OPENSQUILLA_MEMORY_WORKSPACE``, ``{agent}`` substituted), falling back to the
    target workspace. Raises ``ImportSourceError`` and imports nothing on bad input.
    """
    report_progress = progress or _noop_progress
    db_path = Path(db_path)
    source_workspace = _check_workspace(workspace)
    checkpoint_root = _target_root(target_workspace, needed=source_workspace is not None)
    template = memory_workspace or getattr(settings, "OPENSQUILLA_MEMORY_WORKSPACE", None)

    def memory_root_for(agent: str) -> Path:
        if template:
            return Path(str(template).replace("{agent}", normalize_agent_id(agent))).expanduser()
        assert checkpoint_root is not None
        return checkpoint_root

    report = ImportReport(source=str(db_path))
    created_files: list[Path] = []
    with SourceDatabase(db_path) as source:
        report.coverage_columns_present = source.has_coverage_columns
        totals = {
            "sessions": source.count("sessions"),
            "transcript entries": source.count("transcript_entries"),
            "receipts": source.count("memory_durable_receipts"),
        }
        facts = _FileFacts()
        try:
            with transaction.atomic():
                _import_sessions(source, report, report_progress, totals["sessions"])
                _import_entries(source, report, report_progress, totals["transcript entries"])
                _import_receipts(source, report, report_progress, totals["receipts"], facts)
                import_compactions(source)  # degraded ones are repaired by the repair tick
                _reset_entry_sequence()
                if source_workspace is not None and checkpoint_root is not None:
                    _import_files(
                        source_workspace,
                        checkpoint_root,
                        memory_root_for,
                        facts,
                        report,
                        report_progress,
                        created_files,
                    )
                else:
                    report.warn("no_workspace", "no --workspace given: no files were copied")
                if report.changed:
                    _record_summary(report)
        except BaseException:
            remove_created(created_files)
            raise
    return report


# --- arguments ----------------------------------------------------------------------------


def _check_workspace(workspace: Path | None) -> Path | None:
    if workspace is None:
        return None
    path = Path(workspace)
    if not path.is_dir():
        raise ImportSourceError(f"workspace {path} is not a directory")
    return path


def _target_root(target_workspace: Path | None, *, needed: bool) -> Path | None:
    chosen = target_workspace or getattr(settings, "OPENSQUILLA_CHECKPOINT_WORKSPACE", None)
    if not chosen:
        if needed:
            raise ImportSourceError(
                "no target workspace: set OPENSQUILLA_CHECKPOINT_WORKSPACE or pass "
                "--target-workspace"
            )
        return None
    return Path(chosen).expanduser()


# --- sessions -----------------------------------------------------------------------------


def _session_agent(row: SourceSession, key: str) -> str:
    # The key's agent segment wins over the column: upstream's gateway stores "main" for
    # sessions of other agents, and the console groups receipts by the key's agent.
    return agent_id_for_session_key(key) or normalize_agent_id(row.agent_id)


def _import_sessions(
    source: SourceDatabase, report: ImportReport, progress: Progress, total: int
) -> None:
    done = 0
    for batch in source.sessions():
        keys = [canonicalize_session_key(row.session_key) for row in batch]
        local = {s.session_key: s for s in Session.objects.filter(session_key__in=keys)}
        to_create: dict[str, Session] = {}
        to_update: dict[str, Session] = {}
        for row, key in zip(batch, keys, strict=True):
            existing = local.get(key) or to_create.get(key)
            if existing is None:
                session = Session(
                    session_key=key,
                    session_id=row.session_id,
                    epoch=row.epoch,
                    agent_id=_session_agent(row, key),
                    created_at=row.created_at,
                    updated_at=row.updated_at,
                )
                to_create[key] = session
                report.sessions.created += 1
                continue
            outcome = _merge_session(existing, row)
            if outcome == "updated" and existing.pk is not None:
                to_update[key] = existing
            _count(report.sessions, outcome)
            if outcome == "skipped":
                report.warn(
                    "session_conflict",
                    f"session {key}: local generation {existing.session_id} (epoch "
                    f"{existing.epoch}) kept over imported {row.session_id} (epoch {row.epoch})",
                )
        Session.objects.bulk_create(list(to_create.values()), batch_size=500)
        if to_update:
            Session.objects.bulk_update(
                list(to_update.values()), ["session_id", "epoch", "created_at", "updated_at"]
            )
        done += len(batch)
        progress("sessions", done, total)


def _merge_session(existing: Session, row: SourceSession) -> str:
    """Apply an imported session to a local one. The higher epoch names the live generation;
    at equal epochs a different generation is a conflict and the local one is kept."""
    if existing.session_id != row.session_id:
        if row.epoch <= existing.epoch:
            return "skipped"
        existing.session_id = row.session_id
        existing.epoch = row.epoch
        existing.updated_at = max(existing.updated_at, row.updated_at)
        return "updated"
    before = (existing.epoch, existing.created_at, existing.updated_at)
    existing.epoch = max(existing.epoch, row.epoch)
    existing.created_at = min(existing.created_at, row.created_at)
    existing.updated_at = max(existing.updated_at, row.updated_at)
    return (
        "unchanged"
        if before == (existing.epoch, existing.created_at, existing.updated_at)
        else "updated"
    )


def _count(counts: Counts, outcome: str) -> None:
    setattr(counts, outcome, getattr(counts, outcome) + 1)


# --- transcript entries -------------------------------------------------------------------


def _message_id(row: SourceEntry) -> str:
    # Older rows without a message id get a stable one, so a re-import finds them again.
    return row.message_id or f"opensquilla-import-{row.id}"


def _entry_values(row: SourceEntry) -> dict[str, Any]:
    return {
        "session_key": canonicalize_session_key(row.session_key),
        "role": row.role,
        "content": row.content,
        "tool_calls": row.tool_calls,
        "tool_call_id": row.tool_call_id,
        "reasoning_content": row.reasoning_content,
        "token_count": row.token_count,
        "created_at": row.created_at,
    }


def _import_entries(
    source: SourceDatabase, report: ImportReport, progress: Progress, total: int
) -> None:
    done = 0
    remapped_sessions: set[str] = set()
    for batch in source.transcript_entries():
        ids = [row.id for row in batch]
        identities = {(row.session_id, _message_id(row)) for row in batch}
        by_id = {e.id: e for e in TranscriptEntry.objects.filter(id__in=ids)}
        by_identity: dict[tuple[str, str], TranscriptEntry] = {}
        for entry in TranscriptEntry.objects.filter(
            session_id__in={i[0] for i in identities},
            message_id__in={i[1] for i in identities},
        ).order_by("id"):
            by_identity.setdefault((entry.session_id, entry.message_id), entry)
        keep_id: list[TranscriptEntry] = []
        new_id: list[TranscriptEntry] = []
        to_update: list[TranscriptEntry] = []
        for row in batch:
            identity = (row.session_id, _message_id(row))
            values = _entry_values(row)
            same_id = by_id.get(row.id)
            match = (
                same_id
                if same_id is not None and (same_id.session_id, same_id.message_id) == identity
                else by_identity.get(identity)
            )
            if match is not None:
                if all(getattr(match, k) == v for k, v in values.items()):
                    report.transcript_entries.unchanged += 1
                else:
                    for name, value in values.items():
                        setattr(match, name, value)
                    to_update.append(match)
                    report.transcript_entries.updated += 1
                continue
            entry = TranscriptEntry(session_id=row.session_id, message_id=identity[1], **values)
            if same_id is None:
                entry.id = row.id
                keep_id.append(entry)
            else:
                new_id.append(entry)
                remapped_sessions.add(values["session_key"])
            by_identity[identity] = entry
            report.transcript_entries.created += 1
        TranscriptEntry.objects.bulk_create(keep_id, batch_size=500)
        if new_id:
            # Fresh ids must come after every kept id, so reset the sequence first.
            _reset_entry_sequence()
            TranscriptEntry.objects.bulk_create(new_id, batch_size=500)
            report.remapped_entry_ids += len(new_id)
        if to_update:
            TranscriptEntry.objects.bulk_update(to_update, list(_ENTRY_FIELDS), batch_size=500)
        done += len(batch)
        progress("transcript entries", done, total)
    for key in sorted(remapped_sessions):
        report.warn(
            "remapped_ids",
            f"session {key}: some transcript entries got new ids (theirs were taken), so its "
            "imported checkpoints no longer cover the transcript",
        )


def _reset_entry_sequence() -> None:
    """After explicit-id inserts, move PostgreSQL's sequence past them (SQLite needs nothing:
    its AUTOINCREMENT counter follows the largest id inserted)."""
    statements = connection.ops.sequence_reset_sql(no_style(), [TranscriptEntry])
    if statements:
        with connection.cursor() as cursor:
            for sql in statements:
                cursor.execute(sql)


# --- receipts -----------------------------------------------------------------------------


def _receipt_values(row: SourceReceipt) -> dict[str, Any]:
    values = dict(row.values)
    values["session_key"] = canonicalize_session_key(values["session_key"])
    values["agent_id"] = agent_id_for_session_key(values["session_key"]) or ""
    return values


def _note_files(values: dict[str, Any], facts: _FileFacts) -> None:
    agent = values["agent_id"] or "main"
    for name in ("source_path", "target_path"):
        path = values.get(name)
        if path and is_file_path(path):
            facts.agents_by_path.setdefault(normalise(path), set()).add(agent)
    hashed = _HASHED_FILE_COLUMN.get(values["status"])
    if hashed and values.get(hashed) and values.get("content_hash"):
        facts.expected_hash.setdefault(normalise(values[hashed]), set()).add(values["content_hash"])


def _import_receipts(
    source: SourceDatabase,
    report: ImportReport,
    progress: Progress,
    total: int,
    facts: _FileFacts,
) -> None:
    done = 0
    for batch in source.receipts():
        rows = [_receipt_values(row) for row in batch]
        for values in rows:
            check_receipt_path(values["receipt_id"], "source_path", values["source_path"])
            check_receipt_path(values["receipt_id"], "target_path", values["target_path"])
            _note_files(values, facts)
        keys = [v["idempotency_key"] for v in rows]
        by_key = {
            r.idempotency_key: r
            for r in MemoryDurableReceipt.objects.filter(idempotency_key__in=keys)
        }
        taken_ids = set(
            MemoryDurableReceipt.objects.filter(
                receipt_id__in=[v["receipt_id"] for v in rows]
            ).values_list("receipt_id", flat=True)
        )
        to_create: dict[str, MemoryDurableReceipt] = {}
        to_update: dict[str, MemoryDurableReceipt] = {}
        for values in rows:
            key = values["idempotency_key"]
            existing = by_key.get(key) or to_create.get(key)
            if existing is None:
                if values["receipt_id"] in taken_ids:
                    report.receipts.skipped += 1
                    report.warn(
                        "receipt_id_taken",
                        f"receipt {values['receipt_id']}: id already used by another local "
                        "receipt; not imported",
                    )
                    continue
                to_create[key] = MemoryDurableReceipt(**values)
                taken_ids.add(values["receipt_id"])
                report.receipts.created += 1
                continue
            outcome = _merge_receipt(existing, values)
            _count(report.receipts, outcome)
            if outcome == "updated" and existing.pk is not None:
                to_update[key] = existing
        MemoryDurableReceipt.objects.bulk_create(list(to_create.values()), batch_size=500)
        if to_update:
            MemoryDurableReceipt.objects.bulk_update(
                list(to_update.values()),
                [*_RECEIPT_MUTABLE, "agent_id", "resolved_by_receipt_id"],
                batch_size=500,
            )
        done += len(batch)
        progress("receipts", done, total)


def _merge_receipt(existing: MemoryDurableReceipt, values: dict[str, Any]) -> str:
    """The newer ``updated_at`` wins, so re-importing never undoes a local requeue or
    acknowledge. ``receipt_id`` and ``created_at`` of a local row are never changed."""
    if all(getattr(existing, name) == values[name] for name in _RECEIPT_MUTABLE):
        return "unchanged"
    if values["updated_at"] <= existing.updated_at:
        return "skipped"
    for name in _RECEIPT_MUTABLE:
        setattr(existing, name, values[name])
    existing.agent_id = values["agent_id"]
    # The upstream row moved on, so an earlier local resolution no longer describes it.
    existing.resolved_by_receipt_id = None
    return "updated"


# --- files --------------------------------------------------------------------------------


def _import_files(
    workspace: Path,
    checkpoint_root: Path,
    memory_root_for: Callable[[str], Path],
    facts: _FileFacts,
    report: ImportReport,
    progress: Progress,
    created: list[Path],
) -> None:
    for relative, hashes in sorted(facts.expected_hash.items()):
        path = workspace / relative
        if not path.is_file():
            continue
        actual = sha256_file(path)
        if actual not in hashes:
            report.files.hash_mismatches += 1
            report.warn(
                "hash_mismatch",
                f"{relative}: file sha256 {actual[:12]}… differs from its receipt's content_hash",
            )
    for relative in sorted(facts.agents_by_path):
        if relative.startswith((CHECKPOINT_DIR + "/", RAW_FALLBACK_DIR + "/")):
            if not (workspace / relative).is_file():
                report.files.missing += 1
                report.warn(
                    "missing_file", f"{relative} is named by a receipt but not in the workspace"
                )
    plans = plan_copies(
        workspace=workspace,
        checkpoint_root=checkpoint_root,
        memory_root_for=memory_root_for,
        agents_by_path=facts.agents_by_path,
        report=report,
    )
    progress("files", 0, len(plans))
    copy_planned(plans, report, created)
    progress("files", len(plans), len(plans))


def _record_summary(report: ImportReport) -> None:
    audit.record_event(
        receipt_id="",
        action="import",
        reason=f"imported from {report.source}",
        details={
            "source": report.source,
            "sessions": report.sessions.line(),
            "transcript_entries": report.transcript_entries.line(),
            "receipts": report.receipts.line(),
            "files": report.files.line(),
        },
    )
