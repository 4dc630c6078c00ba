"""Applying one batch of OpenSquilla rows to our ledger: the row mapping shared by the one-shot
import (``service.import_opensquilla``) and the live mirror (``receipts_app.mirror``).

Each function takes a batch already read and checked by :mod:`.source`, writes it in the
caller's transaction and counts what it did in an ``ImportReport``. Rows land in the current
gateway (``sessions_app.gateways``: the caller imports inside ``using_gateway``). A transcript
entry keeps its gateway's own id (``gateway_entry_id``) beside a primary key of ours; a
``receipt_id`` is global (``/receipts/<id>``), so one another gateway holds gets a new one
(:func:`apply_receipts`). What "the source row wins"
means for receipts is a parameter (``decide``): the import lets the newer ``updated_at`` win,
the mirror adds what it knows about rows it applied before.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.db import connection

from opensquilla_site.identifiers import control_character_problem
from sessions_app.gateways import DEFAULT_GATEWAY, current_gateway
from sessions_app.keys import agent_id_for_session_key, canonicalize_session_key, normalize_agent_id
from sessions_app.models import Session, TranscriptEntry

from .. import audit, ledger
from ..ledger import LEDGER_FIELDS
from ..models import MemoryDurableReceipt, new_receipt_id
from ..receipt_ids import identifier_columns_problem
from ..statuses import CHECKPOINT_SAVED, PREIMAGE_SAVED
from .paths import check_receipt_path, is_file_path, normalise
from .report import Counts, ImportReport, SkippedRow
from .source import SourceEntry, SourceReceipt, SourceSession

# Receipt columns compared and overwritten when the source row wins: the ledger's conflict
# columns, minus the constant schema version.
RECEIPT_MUTABLE = tuple(
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
class FileFacts:
    """What the receipts say about workspace files, gathered while importing them."""

    agents_by_path: dict[str, set[str]] = field(default_factory=dict)
    expected_hash: dict[str, set[str]] = field(default_factory=dict)


def count(counts: Counts, outcome: str) -> None:
    setattr(counts, outcome, getattr(counts, outcome) + 1)


# --- identifiers with control characters --------------------------------------------------
# Upstream stores any text as a key or id; the ledger refuses control characters in them
# (opensquilla_site.identifiers). Such a source row is skipped, not imported and not fatal:
# counted as skipped and named by its source rowid in a warning (docs/IMPORT.md).

Row = TypeVar("Row", SourceSession, SourceEntry, SourceReceipt)
UNADDRESSABLE = "control_characters"


def _names_problem(named: Sequence[tuple[str, str | None]]) -> str | None:
    for name, value in named:
        problem = control_character_problem(value) if value else None
        if problem is not None:
            return f"{name} {problem}"
    return None


def _key_problem(row: SourceSession | SourceEntry) -> str | None:
    # An entry is checked as its session is, so a skipped session's entries are skipped too.
    key = canonicalize_session_key(row.session_key)
    return _names_problem([("session_key", key), ("session_id", row.session_id)])


def _receipt_problem(row: SourceReceipt) -> str | None:
    return identifier_columns_problem(receipt_values(row))


_PROBLEM: dict[type, tuple[str, Callable[[Any], str | None]]] = {
    SourceSession: ("session", _key_problem),
    SourceEntry: ("transcript entry", _key_problem),
    SourceReceipt: ("receipt", _receipt_problem),
}


def without_unaddressable(batch: Sequence[Row], report: ImportReport, counts: Counts) -> list[Row]:
    """The rows of ``batch`` whose keys and ids hold no control character; each other row is
    counted as skipped in ``counts`` and reported with its source rowid."""
    kept: list[Row] = []
    for row in batch:
        what, problem_of = _PROBLEM[type(row)]
        problem = problem_of(row)
        if problem is None:
            kept.append(row)
            continue
        counts.skipped += 1
        report.warn(UNADDRESSABLE, f"{what} at source rowid {row.rowid}: {problem}; not imported")
        report.skipped_rows.append(
            SkippedRow(
                kind=what,
                rowid=int(row.rowid or 0),
                reason=problem.split("; found ", 1)[0],
                detail=problem,
                name=escaped(_row_name(row)),
            )
        )
    return kept


def _row_name(row: SourceSession | SourceEntry | SourceReceipt) -> str:
    if isinstance(row, SourceReceipt):
        values = row.values
        return str(values.get("receipt_id") or values.get("idempotency_key") or "")
    return str(row.session_key or "")


def escaped(value: str, limit: int = 200) -> str:
    """``value`` with control characters written as escapes (``\\n``, ``\\x00``), cut to
    ``limit``: safe to show in a page, a log line or a CSV cell."""
    # Only the control characters are escaped; other letters stay readable.
    text = "".join(
        ch.encode("unicode_escape").decode("ascii") if control_character_problem(ch) else ch
        for ch in value
    )
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- sessions -----------------------------------------------------------------------------


def _session_agent(row: SourceSession, key: str) -> str:
    # The key's agent segment wins over the column: upstream's gateway stores "main" for
    # sessions of other agents, and the console groups receipts by the key's agent.
    return agent_id_for_session_key(key) or normalize_agent_id(row.agent_id)


def apply_sessions(batch: Sequence[SourceSession], report: ImportReport) -> list[str]:
    """Create or merge each session; returns the canonical keys of the batch, in order
    (without the sessions skipped for a control character in their key or id)."""
    batch = without_unaddressable(batch, report, report.sessions)
    keys = [canonicalize_session_key(row.session_key) for row in batch]
    local = {s.session_key: s for s in Session.objects.here().filter(session_key__in=keys)}
    to_create: dict[str, Session] = {}
    to_update: dict[str, Session] = {}
    for row, key in zip(batch, keys, strict=True):
        existing = local.get(key) or to_create.get(key)
        if existing is None:
            to_create[key] = Session(
                session_key=key,
                session_id=row.session_id,
                epoch=row.epoch,
                agent_id=_session_agent(row, key),
                created_at=row.created_at,
                updated_at=row.updated_at,
            )
            report.sessions.created += 1
            continue
        outcome = merge_session(existing, row)
        if outcome == "updated" and existing.pk is not None:
            to_update[key] = existing
        count(report.sessions, outcome)
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
    return keys


def merge_session(existing: Session, row: SourceSession) -> str:
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


def apply_entries(
    batch: Sequence[SourceEntry], report: ImportReport, *, via: str = "import"
) -> None:
    """Create or update each entry under its own id (docs/IMPORT.md "Transcript entry ids").

    An entry is matched by (gateway, ``session_id``, ``message_id``), a row without a message
    id by one made of its own id, so a re-import or a re-read finds it again. An entry already
    here whose source row now says something else (upstream rewrites a streamed answer in
    place, keeping its id) is updated in place and audited on its session
    (:func:`record_transcript_edits`), with the session's coverage answered before and after.
    One whose own id was not recorded (an entry stored under another id before gateways had
    their own ids) gets it back quietly: nothing the gateway wrote changed."""
    batch = without_unaddressable(batch, report, report.transcript_entries)
    identities = {(row.session_id, _message_id(row)) for row in batch}
    by_identity: dict[tuple[str, str], TranscriptEntry] = {}
    for entry in (
        TranscriptEntry.objects.here()
        .filter(
            session_id__in={i[0] for i in identities},
            message_id__in={i[1] for i in identities},
        )
        .order_by("id")
    ):
        by_identity.setdefault((entry.session_id, entry.message_id), entry)
    to_insert: list[TranscriptEntry] = []
    to_update: list[TranscriptEntry] = []
    own_ids_back: list[TranscriptEntry] = []
    edits: list[EntryEdit] = []
    edited: set[int] = set()
    for row in batch:
        identity = (row.session_id, _message_id(row))
        values = _entry_values(row)
        match = by_identity.get(identity)
        if match is None:
            entry = TranscriptEntry(
                session_id=row.session_id,
                message_id=identity[1],
                gateway_entry_id=row.id,
                **values,
            )
            to_insert.append(entry)
            by_identity[identity] = entry
            report.transcript_entries.created += 1
            continue
        restored = match.gateway_entry_id != row.id and not match._state.adding
        if restored:
            match.gateway_entry_id = row.id
            own_ids_back.append(match)
        if all(getattr(match, k) == v for k, v in values.items()):
            report.transcript_entries.unchanged += 1
            continue
        # Only a row read from our table (not one made earlier in this batch), once.
        if not match._state.adding and match.pk not in edited:
            edited.add(match.pk)
            edits.append(EntryEdit(match, {k: getattr(match, k) for k in values}))
        for name, value in values.items():
            setattr(match, name, value)
        to_update.append(match)
        report.transcript_entries.updated += 1
    insert_entries(to_insert)
    if own_ids_back:
        # Not an update of what the gateway wrote: counted apart (the mirror's lag and rows
        # applied measure the gateway's writes, not this repair).
        TranscriptEntry.objects.bulk_update(own_ids_back, ["gateway_entry_id"], batch_size=500)
        report.own_ids_restored += len(own_ids_back)
    if to_update:
        with _coverage_reanswered(edits) as answer:
            TranscriptEntry.objects.bulk_update(to_update, list(_ENTRY_FIELDS), batch_size=500)
        record_transcript_edits(edits, answer, via=via, source=report.source)


# --- entries edited upstream --------------------------------------------------------------

TRANSCRIPT_EDIT = "transcript_edit"


@dataclass
class EntryEdit:
    """An entry of ours updated from its source row: the entry (new values set) and the old."""

    entry: TranscriptEntry
    old: dict[str, Any]


@dataclass
class CoverageAnswer:
    """Per edited session generation: the saved checkpoint covering it before and after."""

    before: dict[str, str | None] = field(default_factory=dict)
    after: dict[str, str | None] = field(default_factory=dict)


def _sha256(value: Any) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else repr(value)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@contextmanager
def _coverage_reanswered(edits: Sequence[EntryEdit]) -> Iterator[CoverageAnswer]:
    """Answer the coverage of each edited session before the block writes and after it: a
    checkpoint hashed over the old text no longer covers the new (selectors'
    ``current_checkpoint_coverage``, the one coverage rule)."""
    from ..selectors import current_checkpoint_coverage

    answer = CoverageAnswer()
    session_ids = {e.entry.session_id for e in edits}
    sessions = list(Session.objects.here().filter(session_id__in=session_ids)) if edits else []
    for session in sessions:
        covering, _ = current_checkpoint_coverage(session)
        answer.before[session.session_id] = covering.receipt_id if covering else None
    yield answer
    for session in sessions:
        covering, _ = current_checkpoint_coverage(session)
        answer.after[session.session_id] = covering.receipt_id if covering else None


def record_transcript_edits(
    edits: Sequence[EntryEdit], answer: CoverageAnswer, *, via: str, source: str
) -> None:
    """One ``transcript_edit`` event per updated entry, on its session (no receipt): which
    entry, which fields, the old and new content's sha256 (never the text), and the coverage
    before and after."""
    events = []
    for edit in edits:
        entry = edit.entry
        changed = [name for name, old in edit.old.items() if getattr(entry, name) != old]
        before = answer.before.get(entry.session_id)
        after = answer.after.get(entry.session_id)
        if before and before != after:
            coverage = f"; checkpoint {before} no longer covers the session"
        elif after and after != before:
            coverage = f"; checkpoint {after} now covers the session"
        else:
            coverage = ""
        events.append(
            audit.build_event(
                receipt_id="",
                session_key=entry.session_key,
                action=TRANSCRIPT_EDIT,
                reason=f"message {entry.message_id} (entry {entry.own_id}) changed upstream"
                + coverage,
                details={
                    "via": via,
                    "source": source,
                    "gateway": entry.gateway_id,
                    "session_id": entry.session_id,
                    "entry_id": entry.own_id,
                    "message_id": entry.message_id,
                    "fields": changed,
                    "old_content_sha256": _sha256(edit.old.get("content")),
                    "new_content_sha256": _sha256(entry.content),
                    "covered_before": before,
                    "covered_after": after,
                },
            )
        )
    audit.record_events(events)


_ENTRY_FIELDS_WITH_ID = tuple(TranscriptEntry._meta.concrete_fields)
_ENTRY_FIELDS_WITHOUT_ID = tuple(f for f in _ENTRY_FIELDS_WITH_ID if not f.primary_key)


def insert_entries(entries: Sequence[TranscriptEntry]) -> None:
    """Insert new entries, each with its own id in ``gateway_entry_id``.

    Their ``id`` is ours, drawn by the database, so two gateways' ids never compete and
    nothing is renumbered. ``local`` alone keeps today's numbering as well: its entries are
    stored under their own id when it is free (a single-gateway console reads them by it), and
    under a drawn one otherwise; either way their own id is the one upstream values use."""
    if not entries:
        return
    if current_gateway() != DEFAULT_GATEWAY:
        _execute_insert(entries, _ENTRY_FIELDS_WITHOUT_ID)
        return
    for entry in entries:
        entry.id = entry.gateway_entry_id
    inserted = _execute_insert(entries, _ENTRY_FIELDS_WITH_ID, "ON CONFLICT (id) DO NOTHING")
    if inserted != len(entries):
        # Only when some id was held: which ids hold another row than the one meant for them.
        held = {
            pk: identity
            for pk, *identity in TranscriptEntry._base_manager.filter(
                id__in=[e.id for e in entries]
            ).values_list("id", "gateway_id", "session_id", "message_id")
        }
        taken = [
            e for e in entries if held.get(e.id) != [DEFAULT_GATEWAY, e.session_id, e.message_id]
        ]
        for entry in taken:
            entry.id = None
        _execute_insert(taken, _ENTRY_FIELDS_WITHOUT_ID)
    _sequence_past_explicit_ids()


def _execute_insert(
    entries: Sequence[TranscriptEntry], fields: Sequence[Any], conflict: str = ""
) -> int:
    """One ``executemany`` (``bulk_create`` compiled the same INSERT for every 500 rows and
    spent most of a large import doing so), each value prepared by its field exactly as a
    model save would (JSON included). Returns the rows inserted."""
    if not entries:
        return 0
    table = connection.ops.quote_name(TranscriptEntry._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(str(f.column)) for f in fields)
    marks = ", ".join(["%s"] * len(fields))
    params = [
        [f.get_db_prep_save(getattr(entry, f.attname), connection) for f in fields]
        for entry in entries
    ]
    with connection.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {table} ({columns}) VALUES ({marks}) {conflict}",  # noqa: S608 - model metadata
            params,
        )
        return int(cursor.rowcount)


def _sequence_past_explicit_ids() -> None:
    """After ``local``'s explicit-id inserts, move PostgreSQL's id sequence past them (SQLite's
    AUTOINCREMENT counter follows the largest id by itself). Never backwards: the sequence is
    not transactional, and another gateway's follower may have drawn ids this transaction
    cannot see yet."""
    if connection.vendor != "postgresql":
        return
    table = TranscriptEntry._meta.db_table
    biggest = f"SELECT COALESCE(MAX(id), 1) FROM {connection.ops.quote_name(table)}"  # noqa: S608 - model metadata
    sql = (
        "SELECT setval(pg_get_serial_sequence(%s, 'id'), "
        f"GREATEST(nextval(pg_get_serial_sequence(%s, 'id')), ({biggest})))"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [table, table])


# --- receipts -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ReceiptChange:
    """What happened to one source receipt: ``prior_status`` is the local status before
    (None for a created row); ``outcome`` is created/updated/unchanged/skipped."""

    values: dict[str, Any]
    prior_status: str | None
    outcome: str


Decide = Callable[[MemoryDurableReceipt, dict[str, Any]], str]


def receipt_values(row: SourceReceipt) -> dict[str, Any]:
    values = dict(row.values)
    values["session_key"] = canonicalize_session_key(values["session_key"])
    values["agent_id"] = agent_id_for_session_key(values["session_key"]) or ""
    return values


def note_files(values: dict[str, Any], facts: FileFacts) -> None:
    agent = values["agent_id"] or "main"
    for name in ("source_path", "target_path"):
        path = values.get(name)
        if path and is_file_path(path):
            facts.agents_by_path.setdefault(normalise(path), set()).add(agent)
    hashed = _HASHED_FILE_COLUMN.get(values["status"])
    if hashed and values.get(hashed) and values.get("content_hash"):
        facts.expected_hash.setdefault(normalise(values[hashed]), set()).add(values["content_hash"])


def newer_wins(existing: MemoryDurableReceipt, values: dict[str, Any]) -> str:
    """The import's rule: the newer ``updated_at`` wins, so re-importing never undoes a local
    requeue or acknowledge (those are stamped later than the source row they resolved)."""
    if all(getattr(existing, name) == values[name] for name in RECEIPT_MUTABLE):
        return "unchanged"
    if values["updated_at"] <= existing.updated_at:
        return "skipped"
    return "updated"


def apply_receipts(
    batch: Sequence[SourceReceipt],
    report: ImportReport,
    facts: FileFacts,
    *,
    decide: Decide = newer_wins,
) -> list[ReceiptChange]:
    """Create new receipts and overwrite those ``decide`` says the source wins, through the
    ledger's bulk upsert with the source stamps kept. ``receipt_id`` and ``created_at`` of a
    local row never change; an overwritten row loses its local resolution link (the upstream
    row moved on, so the earlier resolution no longer describes it). A row with a control
    character in a key or id is skipped and reported, and has no ``ReceiptChange``."""
    batch = without_unaddressable(batch, report, report.receipts)
    rows = [receipt_values(row) for row in batch]
    for values in rows:
        check_receipt_path(values["receipt_id"], "source_path", values["source_path"])
        check_receipt_path(values["receipt_id"], "target_path", values["target_path"])
        note_files(values, facts)
    keys = [v["idempotency_key"] for v in rows]
    by_key = {
        r.idempotency_key: r
        for r in MemoryDurableReceipt.objects.here().filter(idempotency_key__in=keys)
    }
    # receipt_id is global (/receipts/<id>): one held by another gateway's receipt gets a new
    # id here, one held by another receipt of this gateway is a conflict, as before gateways.
    gateway = current_gateway()
    taken_ids: dict[str, str] = dict(
        MemoryDurableReceipt._base_manager.filter(
            receipt_id__in=[v["receipt_id"] for v in rows]
        ).values_list("receipt_id", "gateway_id")
    )
    writes: dict[str, dict[str, Any]] = {}
    changes: list[ReceiptChange] = []
    for values in rows:
        key = values["idempotency_key"]
        existing = by_key.get(key)
        if existing is None:
            if key in writes:  # the same key twice in one batch: the later row wins
                writes[key] = {**values, "receipt_id": writes[key]["receipt_id"]}
                continue
            holder = taken_ids.get(values["receipt_id"])
            if holder is not None and holder != gateway:
                values = {**values, "receipt_id": new_receipt_id()}
                report.remapped_receipt_ids += 1
                report.warn(
                    "receipt_id_remapped",
                    f"receipt {values['idempotency_key']}: its id is held by a receipt of "
                    f"gateway {holder}, so it was given the new id {values['receipt_id']}",
                )
            elif holder is not None:
                report.receipts.skipped += 1
                report.warn(
                    "receipt_id_taken",
                    f"receipt {values['receipt_id']}: id already used by another local "
                    "receipt; not imported",
                )
                changes.append(ReceiptChange(values, None, "skipped"))
                continue
            writes[key] = values
            taken_ids[values["receipt_id"]] = gateway
            report.receipts.created += 1
            changes.append(ReceiptChange(values, None, "created"))
            continue
        outcome = decide(existing, values)
        count(report.receipts, outcome)
        changes.append(ReceiptChange(values, existing.status, outcome))
        if outcome == "updated":
            writes[key] = {
                **values,
                "receipt_id": existing.receipt_id,
                "created_at": existing.created_at,
            }
    if writes:
        ledger.bulk_upsert_memory_durable_receipts(
            [_receipt(values) for values in writes.values()], keep_stamps=True
        )
    return changes


def _receipt(values: dict[str, Any]) -> MemoryDurableReceipt:
    fields = {name: values[name] for name in LEDGER_FIELDS}
    return MemoryDurableReceipt(**fields, resolved_by_receipt_id=None)
