"""One mirror pass: everything the source changed since the stored cursor, applied in batches.

Each batch is one transaction of ours that (1) locks the source's ``MirrorSource`` row and
checks the lease, (2) checks that the cursor is still where this pass left it, (3) applies the
rows through the importer's row mapping (:mod:`receipts_app.importer.rows`) and the ledger,
(4) advances the cursor. A follower killed at any point loses nothing and applies nothing
twice: the rows and the cursor commit together.

Receipts are read from ``updated_at - OVERLAP_MS``: two upstream writers may commit out of
stamp order, so a short window is read again and deduplicated by (idempotency key,
``updated_at``) against what ``MirroredReceipt`` says was applied.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import transaction

from opensquilla_site.timeutil import now_ms
from sessions_app.keys import normalize_agent_id

from .. import audit
from ..importer import ImportReport, rows
from ..importer.files import copy_planned, plan_copies, plan_named_copies
from ..importer.rows import FileFacts, ReceiptChange
from ..importer.source import CHUNK, Fingerprint, SourceDatabase
from ..models import MemoryDurableReceipt
from .models import (
    MirroredReceipt,
    MirroredSession,
    MirroredTranscript,
    MirrorSkippedRow,
    MirrorSource,
)

log = logging.getLogger("receipts_app.mirror")

OVERLAP_MS = 5_000
# A touched session's newest TAIL_ROWS to 2 * TAIL_ROWS entries are compared on every pass
# (upstream rewrites a streamed answer there); the whole transcript, digest included (every row
# hashed inside SQLite), every STRONG_CHECK_MS per STRONG_ROWS entries (docs/MIRROR.md).
TAIL_ROWS = 32
STRONG_CHECK_MS = 10_000
STRONG_ROWS = 10_000
MIRROR_ACTOR = audit.Actor("opensquilla-mirror", "system")


class Standby(Exception):
    """Another live follower holds this source's lease; this one waits."""


class CursorMoved(Exception):
    """The stored cursor moved under this pass (another follower applied rows): start over."""


@dataclass
class Targets:
    """Where files go: the source workspace (None: rows only) and our workspaces."""

    workspace: Path | None
    checkpoint_root: Path | None
    memory_template: str | None

    def memory_root_for(self, agent: str) -> Path:
        if self.memory_template:
            return Path(self.memory_template.replace("{agent}", normalize_agent_id(agent)))
        assert self.checkpoint_root is not None
        return self.checkpoint_root

    @property
    def copies_files(self) -> bool:
        return (
            self.workspace is not None
            and self.checkpoint_root is not None
            and self.workspace.is_dir()
        )


class RecentlyApplied:
    """Upstream stamps this follower applied within the overlap window, per natural key.

    The overlap re-read finds them again on every pass; skipping them here keeps a busy
    source's passes short (no lookups, no transaction) without changing any outcome: the
    database-side dedupe would call each of them unchanged. Filled as batches apply; a pass
    that fails puts it back as it was (SyncPass.run).
    """

    def __init__(self) -> None:
        self.stamps: dict[str, int] = {}

    def seen(self, key: str, updated_at: int) -> bool:
        return self.stamps.get(key) == updated_at

    def remember(self, pairs: Sequence[tuple[str, int]]) -> None:
        self.stamps.update(pairs)

    def prune(self, cursor_ms: int) -> None:
        horizon = cursor_ms - OVERLAP_MS
        self.stamps = {k: v for k, v in self.stamps.items() if v >= horizon}


@dataclass
class PassResult:
    report: ImportReport
    applied: int = 0  # rows created or updated here
    newest_source_ms: int | None = None  # newest upstream stamp among applied rows
    oldest_source_ms: int | None = None  # oldest: the change that waited longest (the lag)
    status_changes: int = 0
    edited_sessions: int = 0  # sessions whose entries were read again (an edit upstream)
    names: list[str] = field(default_factory=list)


def owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _owner_alive(owner: str) -> bool:
    """A lease of a dead process on this host is free at once (a restart after SIGKILL need
    not wait for the lease to run out); other hosts' leases are trusted until they expire."""
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lock_source(source_id: int, owner: str, lease_ms: int) -> MirrorSource:
    """Inside a transaction: lock the source row and take or renew the lease, or ``Standby``."""
    src = MirrorSource.objects.select_for_update().get(pk=source_id)
    now = now_ms()
    held_by_other = src.lease_owner and src.lease_owner != owner
    if held_by_other and src.lease_until > now and _owner_alive(src.lease_owner):
        raise Standby(src.lease_owner)
    src.lease_owner = owner
    src.lease_until = now + lease_ms
    return src


class SyncPass:
    """Apply everything after the cursor. ``progress(stage, done, total)`` as the importer's."""

    def __init__(
        self,
        *,
        source_id: int,
        db: SourceDatabase,
        owner: str,
        lease_ms: int,
        targets: Targets,
        progress: Callable[[str, int, int], None] | None = None,
        totals: dict[str, int] | None = None,
        recent_sessions: RecentlyApplied | None = None,
        recent_receipts: RecentlyApplied | None = None,
        strong_checked: dict[str, int] | None = None,
        strong_pending: dict[str, int] | None = None,
        strong_rows: dict[str, int] | None = None,
    ) -> None:
        # Kept by the follower across passes: session_id -> when its digest was last
        # compared; and the sessions whose comparison was put off (not due yet), with the
        # time of their last one, compared once due whether touched again or not.
        self.strong_checked = strong_checked if strong_checked is not None else {}
        self.strong_pending = strong_pending if strong_pending is not None else {}
        # ...and how many entries it had then (the whole comparison's interval grows with it).
        self.strong_rows = strong_rows if strong_rows is not None else {}
        self.recent_sessions = recent_sessions or RecentlyApplied()
        self.recent_receipts = recent_receipts or RecentlyApplied()
        self.source_id = source_id
        self.db = db
        self.owner = owner
        self.lease_ms = lease_ms
        self.targets = targets
        self.progress = progress
        self.totals = totals or {}
        self.result = PassResult(report=ImportReport(source=str(db.path)))
        # Session generations (session_id) touched in this pass, and per generation the
        # fingerprint of the entries this pass applied (docs/MIRROR.md "Edited messages").
        self.touched: set[str] = set()
        self.applied_entries: dict[str, Fingerprint] = {}
        self._skipped_recorded = 0
        # The open transaction (see _held_source): its locked source row, the context that
        # commits it, the cursor fields it moved and the rows it holds.
        self._held: MirrorSource | None = None
        self._scope: ExitStack | None = None
        self._dirty: set[str] = set()
        self._rows_held = 0

    def run(
        self, finish: Callable[[MirrorSource, PassResult], Sequence[str]] | None = None
    ) -> PassResult:
        """The pass. ``finish(src, result)`` runs in the pass's last transaction, with the
        source row locked, before it commits (the follower records the pass there); it
        returns the fields of ``src`` it set, saved with the cursors."""
        kept = self._follower_state()
        try:
            start = self._held_source()
            self._sessions(start)
            through = self._entries(start)
            self._edits(through)
            self._receipts(start)
            if finish is not None:
                self._dirty.update(finish(self._held_source(), self.result))
            self._commit()
        except BaseException as exc:
            self._abort(exc)
            self._restore_follower_state(kept)
            raise
        return self.result

    def _follower_state(self) -> tuple[dict[str, int], ...]:
        return (
            dict(self.recent_sessions.stamps),
            dict(self.recent_receipts.stamps),
            dict(self.strong_checked),
            dict(self.strong_pending),
            dict(self.strong_rows),
        )

    def _restore_follower_state(self, kept: tuple[dict[str, int], ...]) -> None:
        """A pass that failed leaves the follower's memory as it was before it: what it
        remembered applying was rolled back with its transaction (the next pass, reading from
        the committed cursors, would otherwise skip those rows as already applied)."""
        sessions, receipts, checked, pending, strong_rows = kept
        self.recent_sessions.stamps = sessions
        self.recent_receipts.stamps = receipts
        # The follower holds these two dicts: change them in place.
        self.strong_checked.clear()
        self.strong_checked.update(checked)
        self.strong_pending.clear()
        self.strong_pending.update(pending)
        self.strong_rows.clear()
        self.strong_rows.update(strong_rows)

    # --- the pass's transactions --------------------------------------------------------------
    #
    # A following pass is a handful of rows in each stage: one transaction of ours for the whole
    # pass (one lock, one cursor write, one commit) instead of one per batch, which is most of a
    # small pass's cost. A long pass (the initial import, a catch-up after downtime) commits
    # every ``CHUNK`` rows, so it keeps its progress as it goes; the rows and the cursors that
    # cover them always commit together, so a kill at any point loses and repeats nothing.

    def _held_source(self) -> MirrorSource:
        """The locked source row of the open transaction; opens one (locks, takes the lease)."""
        if self._held is None:
            transaction_scope = ExitStack()
            transaction_scope.enter_context(transaction.atomic())
            transaction_scope.enter_context(audit.acting_as(MIRROR_ACTOR))
            self._scope = transaction_scope  # rolled back by run() if the lock fails
            self._held = lock_source(self.source_id, self.owner, self.lease_ms)
            self._dirty = set()
            self._rows_held = 0
        return self._held

    def _commit(self) -> None:
        if self._held is None:
            return
        src, scope = self._held, self._scope
        self._held, self._scope = None, None
        src.heartbeat_at = now_ms()
        src.save(update_fields=sorted({*self._dirty, "lease_owner", "lease_until", "heartbeat_at"}))
        assert scope is not None
        scope.close()

    def _abort(self, exc: BaseException) -> None:
        """Roll the open transaction back (nothing of it is kept, its cursors included)."""
        scope = self._scope
        self._held, self._scope = None, None
        if scope is not None:
            scope.__exit__(type(exc), exc, exc.__traceback__)

    def _apply(
        self,
        cursor_fields: Sequence[str],
        expected: tuple[Any, ...],
        new_position: tuple[Any, ...],
        apply: Callable[[MirrorSource], None],
        rows: int = 0,
    ) -> tuple[Any, ...]:
        src = self._held_source()
        if tuple(getattr(src, name) for name in cursor_fields) != expected:
            raise CursorMoved
        apply(src)
        self._record_skipped(src)
        position = max(expected, new_position)
        for name, value in zip(cursor_fields, position, strict=True):
            setattr(src, name, value)
        self._dirty.update(cursor_fields)
        self._rows_held += rows
        if self._rows_held >= CHUNK:
            self._commit()
        return position

    def _record_skipped(self, src: MirrorSource) -> None:
        """Keep each row the batch skipped (in the batch's transaction, with the cursor that
        moves past it): the overview counts them, the liveness page lists them."""
        skipped = self.result.report.skipped_rows[self._skipped_recorded :]
        self._skipped_recorded += len(skipped)
        now = now_ms()
        for row in skipped:
            MirrorSkippedRow.objects.update_or_create(
                source=src,
                kind=row.kind,
                source_rowid=row.rowid,
                defaults={
                    "reason": row.reason[:200],
                    "detail": row.detail,
                    "name": row.name,
                    "last_seen_at": now,
                },
                create_defaults={
                    "reason": row.reason[:200],
                    "detail": row.detail,
                    "name": row.name,
                    "first_seen_at": now,
                    "last_seen_at": now,
                },
            )

    def _tick(self, stage: str, done: int) -> None:
        if self.progress is not None:
            self.progress(stage, done, max(done, self.totals.get(stage, done)))

    # --- sessions -------------------------------------------------------------------------

    def _sessions(self, start: MirrorSource) -> None:
        fields = ("sessions_updated_at", "sessions_key")
        position: tuple[Any, ...] = (start.sessions_updated_at, start.sessions_key)
        since = max(0, start.sessions_updated_at - OVERLAP_MS)
        done = 0
        for batch in self.db.sessions_after(since, "", seen=self.recent_sessions.seen):
            done += len(batch)
            if batch:
                last = batch[-1]

                def apply(src: MirrorSource, batch: list[Any] = batch) -> None:
                    report = self.result.report
                    before = report.sessions.created + report.sessions.updated
                    keys = rows.apply_sessions(batch, report)
                    _mark_alive(MirroredSession, src, "session_key", keys)
                    after = report.sessions.created + report.sessions.updated
                    self.result.applied += after - before
                    if after > before:
                        self._stamps([row.updated_at for row in batch])

                position = self._apply(
                    fields, position, (last.updated_at, last.session_key), apply, len(batch)
                )
                self.recent_sessions.remember([(r.session_key, r.updated_at) for r in batch])
                # A touched session: upstream bumps updated_at on every transcript write,
                # the in-place rewrite of a row included (docs/MIRROR.md).
                self.touched.update(r.session_id for r in batch)
            self._tick("sessions", done)
        self.recent_sessions.prune(position[0])

    # --- transcript entries ---------------------------------------------------------------

    def _entries(self, start: MirrorSource) -> int:
        """Apply every entry after the cursor; returns the cursor after them."""
        fields = ("entries_id",)
        position: tuple[Any, ...] = (start.entries_id,)
        done = 0
        for batch in self.db.entries_after(start.entries_id):
            last_id = batch[-1].id

            def apply(src: MirrorSource, batch: list[Any] = batch) -> None:
                report = self.result.report
                before = report.transcript_entries.created + report.transcript_entries.updated
                rows.apply_entries(batch, report, via="mirror")
                after = report.transcript_entries.created + report.transcript_entries.updated
                self.result.applied += after - before
                if after > before:
                    self._stamps([row.created_at for row in batch])

            position = self._apply(fields, position, (last_id,), apply, len(batch))
            for entry in batch:
                self.applied_entries[entry.session_id] = self.applied_entries.get(
                    entry.session_id, Fingerprint()
                ).plus(Fingerprint(1, entry.native, entry.digest))
            self.touched.update(self.applied_entries)
            done += len(batch)
            self._tick("transcript entries", done)
        return int(position[0])

    # --- entries edited in place upstream -------------------------------------------------

    def _edits(self, through: int) -> None:
        """For each touched session, compare the file's fingerprint of its **tail** (the
        entries after the stored ``tail_from``, up to ``through``; computed inside SQLite) with
        the stored tail plus what this pass applied; where they differ, read the tail again
        and apply it. A pass costs the tails' lengths, never the sessions'.

        The whole session (count, native sum and digest: any edit anywhere) is compared on a
        slower clock, :func:`strong_interval` per session, and read again whole where it
        differs. A session with no stored fingerprint (new, or first touched since it was
        dropped) is compared whole once: it holds exactly what this pass applied when nothing
        else was there."""
        now = now_ms()
        due = {sid for sid, at in self.strong_pending.items() if self._strong_due(sid, at, now)}
        touched = sorted(self.touched | due)
        for start in range(0, len(touched), CHUNK):
            chunk = touched[start : start + CHUNK]
            stored = {
                t.session_id: t
                for t in MirroredTranscript.objects.filter(
                    source_id=self.source_id, session_id__in=chunk
                )
            }
            fresh = [sid for sid in chunk if sid not in stored]
            whole_found = self.db.fingerprints(fresh, through) if fresh else {}
            tails_found = self.db.tail_fingerprints(
                {sid: stored[sid].tail_from for sid in chunk if sid in stored}, through
            )
            held: dict[str, HeldTranscript] = {}
            whole_due: list[str] = []
            for session_id in chunk:
                applied = self.applied_entries.get(session_id, Fingerprint())
                row = stored.get(session_id)
                if row is None:
                    found = whole_found.get(session_id, Fingerprint())
                    if (found.count, found.native) != (applied.count, applied.native):
                        self._reread(session_id, through, HeldTranscript())
                        continue
                    held[session_id] = HeldTranscript(applied, 0, applied)
                    self._strong_checked_now(session_id, applied.count, now)
                    continue
                before = HeldTranscript.of(row)
                mine = before.plus(applied)
                found = tails_found.get(session_id, Fingerprint())
                if (found.count, found.native) != (mine.tail.count, mine.tail.native):
                    self._reread(session_id, through, before)
                    continue
                held[session_id] = mine
                last = self.strong_checked.get(session_id, 0)
                self.strong_rows[session_id] = mine.whole.count
                if self._strong_due(session_id, last, now):
                    whole_due.append(session_id)
                else:
                    self.strong_pending.setdefault(session_id, last)
            if whole_due:
                digests = self.db.fingerprints(whole_due, through, strong=True)
                for session_id in whole_due:
                    self.strong_pending.pop(session_id, None)
                    if digests.get(session_id, Fingerprint()) != held[session_id].whole:
                        self._reread(session_id, through, HeldTranscript())
                        del held[session_id]
                        continue
                    self._strong_checked_now(session_id, held[session_id].whole.count, now)
            for session_id, kept in list(held.items()):
                held[session_id] = self._short_tail(session_id, through, kept)
            # Only what moved is written: a session touched without a new entry keeps its row.
            moved = {
                sid: kept
                for sid, kept in held.items()
                if sid not in stored or HeldTranscript.of(stored[sid]) != kept
            }
            if moved:

                def keep(src: MirrorSource, found: dict[str, HeldTranscript] = moved) -> None:
                    _store_fingerprints(src, through, found)

                self._apply(("entries_id",), (through,), (through,), keep)
        # A session not in the map is due: forgetting the old stamps changes nothing.
        for session_id in [
            k for k, v in self.strong_checked.items() if self._strong_due(k, v, now_ms())
        ]:
            del self.strong_checked[session_id]
            if session_id not in self.strong_pending:
                self.strong_rows.pop(session_id, None)

    def _strong_due(self, session_id: str, last: int, now: int) -> bool:
        return now - last >= strong_interval(self.strong_rows.get(session_id, 0))

    def _strong_checked_now(self, session_id: str, rows: int, now: int) -> None:
        self.strong_checked[session_id] = now
        self.strong_rows[session_id] = rows
        self.strong_pending.pop(session_id, None)

    def _short_tail(self, session_id: str, through: int, kept: HeldTranscript) -> HeldTranscript:
        """A tail grown past ``2 * TAIL_ROWS`` starts again at the newest ``TAIL_ROWS``: its
        boundary moves up and its fingerprint is read for those rows (digest included), so the
        tail stays a few dozen rows however long the session grows."""
        if kept.tail.count <= 2 * TAIL_ROWS:
            return kept
        boundary = self.db.tail_start(session_id, through, TAIL_ROWS)
        if boundary is None or boundary <= kept.tail_from:
            return kept
        tail = self.db.tail_fingerprints({session_id: boundary}, through, strong=True)
        return HeldTranscript(kept.whole, boundary, tail.get(session_id, Fingerprint()))

    def _reread(self, session_id: str, through: int, before: HeldTranscript) -> None:
        """Read a session's entries after ``before.tail_from`` again and apply them (all of them
        for an empty ``before``); what is stored is the untouched head plus what was read."""

        def apply(src: MirrorSource) -> None:
            report = self.result.report
            counts = report.transcript_entries
            created_or_updated = counts.created + counts.updated
            seen = Fingerprint()
            for batch in self.db.entries_of_session(session_id, through, before.tail_from):
                rows.apply_entries(batch, report, via="mirror")
                seen = seen.plus(Fingerprint.of(batch))
            self.result.applied += counts.created + counts.updated - created_or_updated
            self.result.edited_sessions += 1
            # What was just read, not a second look at the file: an edit committed meanwhile
            # is found by the next pass.
            head = before.whole.minus(before.tail)
            found = HeldTranscript(head.plus(seen), before.tail_from, seen)
            found = self._short_tail(session_id, through, found)
            _store_fingerprints(src, through, {session_id: found})
            read[session_id] = found.whole.count

        read: dict[str, int] = {}
        self._apply(("entries_id",), (through,), (through,), apply)
        if not before.tail_from:  # the whole session was read: it holds what the file has
            self._strong_checked_now(session_id, read[session_id], now_ms())

    # --- receipts -------------------------------------------------------------------------

    def _receipts(self, start: MirrorSource) -> None:
        fields = ("receipts_updated_at", "receipts_key")
        position: tuple[Any, ...] = (start.receipts_updated_at, start.receipts_key)
        since = max(0, start.receipts_updated_at - OVERLAP_MS)
        done = 0
        for batch in self.db.receipts_after(since, "", seen=self.recent_receipts.seen):
            done += len(batch)
            if batch:
                last = batch[-1].values

                def apply(src: MirrorSource, batch: list[Any] = batch) -> None:
                    self._apply_receipts(src, batch)

                position = self._apply(
                    fields,
                    position,
                    (last["updated_at"], last["idempotency_key"]),
                    apply,
                    len(batch),
                )
                self.recent_receipts.remember(
                    [(r.values["idempotency_key"], r.values["updated_at"]) for r in batch]
                )
            self._tick("receipts", done)
        self.recent_receipts.prune(position[0])

    def _apply_receipts(self, src: MirrorSource, batch: list[Any]) -> None:
        keys = [row.values["idempotency_key"] for row in batch]
        mirrored = {
            m.idempotency_key: m
            for m in MirroredReceipt.objects.filter(source=src, idempotency_key__in=keys)
        }
        facts = FileFacts()
        changes = rows.apply_receipts(
            batch, self.result.report, facts, decide=_mirror_rule(mirrored)
        )
        applied = [c for c in changes if c.outcome in ("created", "updated")]
        self.result.applied += len(applied)
        if applied:
            self._stamps([c.values["updated_at"] for c in applied])
        self._record_status_changes(applied)
        fresh = [
            c
            for c in changes
            if c.values["idempotency_key"] not in mirrored
            or c.values["updated_at"] > mirrored[c.values["idempotency_key"]].source_updated_at
            or mirrored[c.values["idempotency_key"]].gone_at is not None
        ]
        if fresh:
            MirroredReceipt.objects.bulk_create(
                [
                    MirroredReceipt(
                        source=src,
                        idempotency_key=c.values["idempotency_key"],
                        source_updated_at=c.values["updated_at"],
                        source_status=c.values["status"],
                        gone_at=None,
                    )
                    for c in fresh
                ],
                update_conflicts=True,
                unique_fields=["source", "idempotency_key"],
                update_fields=["source_updated_at", "source_status", "gone_at"],
                batch_size=500,
            )
        if applied:
            self._copy_named_files(applied)

    def _record_status_changes(self, applied: list[ReceiptChange]) -> None:
        moved = [c for c in applied if c.prior_status and c.prior_status != c.values["status"]]
        if not moved:
            return
        local = dict(
            MemoryDurableReceipt.objects.here()
            .filter(idempotency_key__in=[c.values["idempotency_key"] for c in moved])
            .values_list("idempotency_key", "receipt_id")
        )
        audit.record_events(
            [
                audit.build_event(
                    receipt_id=local.get(c.values["idempotency_key"], c.values["receipt_id"]),
                    session_key=c.values["session_key"],
                    action="status_change",
                    from_status=c.prior_status,
                    to_status=c.values["status"],
                    reason=c.values.get("reason"),
                    details={"via": "mirror", "source": str(self.db.path)},
                )
                for c in moved
            ]
        )
        self.result.status_changes += len(moved)

    def _copy_named_files(self, applied: list[ReceiptChange]) -> None:
        if not self.targets.copies_files:
            return
        facts = FileFacts()
        for change in applied:
            rows.note_files(change.values, facts)
        assert self.targets.workspace is not None and self.targets.checkpoint_root is not None
        plans = plan_named_copies(
            workspace=self.targets.workspace,
            checkpoint_root=self.targets.checkpoint_root,
            memory_root_for=self.targets.memory_root_for,
            agents_by_path=facts.agents_by_path,
            report=self.result.report,
        )
        copy_planned(plans, self.result.report, [])

    def _stamps(self, stamps: list[int]) -> None:
        newest, oldest = self.result.newest_source_ms, self.result.oldest_source_ms
        self.result.newest_source_ms = max(stamps) if newest is None else max(newest, *stamps)
        self.result.oldest_source_ms = min(stamps) if oldest is None else min(oldest, *stamps)


def _mirror_rule(
    mirrored: dict[str, MirroredReceipt],
) -> Callable[[MemoryDurableReceipt, dict[str, Any]], str]:
    """The mirror's merge rule (docs/MIRROR.md "Local resolutions").

    - A row the mirror never applied: the import's rule (newer ``updated_at`` wins).
    - Already applied at this upstream stamp or later: unchanged (the overlap re-read).
    - Changed here since it was applied (its ``updated_at`` is no longer upstream's): kept,
      unless upstream moved it to another status, which is news the operator must see.
    - Otherwise upstream's values win.
    """

    def decide(existing: MemoryDurableReceipt, values: dict[str, Any]) -> str:
        seen = mirrored.get(values["idempotency_key"])
        if seen is None:
            return rows.newer_wins(existing, values)
        if values["updated_at"] <= seen.source_updated_at:
            return "unchanged"
        changed_here = existing.updated_at != seen.source_updated_at
        if changed_here and values["status"] == seen.source_status:
            return "skipped"
        if all(getattr(existing, name) == values[name] for name in rows.RECEIPT_MUTABLE):
            return "unchanged"
        return "updated"

    return decide


@dataclass(frozen=True)
class HeldTranscript:
    """What the mirror holds of one session generation: the whole transcript's fingerprint and
    its tail's (the rows after ``tail_from``)."""

    whole: Fingerprint = field(default_factory=Fingerprint)
    tail_from: int = 0
    tail: Fingerprint = field(default_factory=Fingerprint)

    @classmethod
    def of(cls, row: MirroredTranscript) -> HeldTranscript:
        return cls(
            Fingerprint(row.entry_count, row.native, row.digest),
            row.tail_from,
            Fingerprint(row.tail_count, row.tail_native, row.tail_digest),
        )

    def plus(self, applied: Fingerprint) -> HeldTranscript:
        """With entries applied after it: they are newer than every held row, so in the tail."""
        return HeldTranscript(self.whole.plus(applied), self.tail_from, self.tail.plus(applied))


def strong_interval(rows: int) -> float:
    """How often a session's whole transcript is compared (digest included): every
    ``STRONG_CHECK_MS`` per ``STRONG_ROWS`` entries, so its cost, amortised over the passes,
    stays the same however long the session grows."""
    return STRONG_CHECK_MS * max(1.0, rows / STRONG_ROWS)


def _store_fingerprints(src: MirrorSource, through: int, found: dict[str, HeldTranscript]) -> None:
    MirroredTranscript.objects.bulk_create(
        [
            MirroredTranscript(
                source=src,
                session_id=session_id,
                through_id=through,
                entry_count=held.whole.count,
                native=held.whole.native,
                digest=held.whole.digest,
                tail_from=held.tail_from,
                tail_count=held.tail.count,
                tail_native=held.tail.native,
                tail_digest=held.tail.digest,
            )
            for session_id, held in found.items()
        ],
        update_conflicts=True,
        unique_fields=["source", "session_id"],
        update_fields=[
            "through_id",
            "entry_count",
            "native",
            "digest",
            "tail_from",
            "tail_count",
            "tail_native",
            "tail_digest",
        ],
        batch_size=500,
    )


def _mark_alive(model: Any, src: MirrorSource, key_field: str, keys: Sequence[str]) -> None:
    if not keys:
        return
    model.objects.bulk_create(
        [model(source=src, **{key_field: key}, gone_at=None) for key in dict.fromkeys(keys)],
        update_conflicts=True,
        unique_fields=["source", key_field],
        update_fields=["gone_at"],
        batch_size=500,
    )


def copy_all_files(targets: Targets, facts: FileFacts, report: ImportReport) -> None:
    """The full workspace walk (initial pass and reconciliation): unreferenced archives too."""
    if not targets.copies_files:
        return
    assert targets.workspace is not None and targets.checkpoint_root is not None
    plans = plan_copies(
        workspace=targets.workspace,
        checkpoint_root=targets.checkpoint_root,
        memory_root_for=targets.memory_root_for,
        agents_by_path=facts.agents_by_path,
        report=report,
    )
    copy_planned(plans, report, [])
