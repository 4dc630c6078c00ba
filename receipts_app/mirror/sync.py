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
from ..importer.source import SourceDatabase
from ..models import MemoryDurableReceipt
from .models import MirroredReceipt, MirroredSession, MirrorSkippedRow, MirrorSource

log = logging.getLogger("receipts_app.mirror")

OVERLAP_MS = 5_000
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
    database-side dedupe would call each of them unchanged. Filled only after a commit.
    """

    def __init__(self) -> None:
        self.stamps: dict[str, int] = {}

    def fresh(self, key: str, updated_at: int) -> bool:
        return self.stamps.get(key) != updated_at

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
    status_changes: int = 0
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
    ) -> None:
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
        self._skipped_recorded = 0

    def run(self) -> PassResult:
        start = MirrorSource.objects.get(pk=self.source_id)
        self._sessions(start)
        self._entries(start)
        self._receipts(start)
        return self.result

    # --- one transaction per batch ----------------------------------------------------------

    def _apply(
        self,
        cursor_fields: Sequence[str],
        expected: tuple[Any, ...],
        new_position: tuple[Any, ...],
        apply: Callable[[MirrorSource], None],
    ) -> tuple[Any, ...]:
        with transaction.atomic(), audit.acting_as(MIRROR_ACTOR):
            src = lock_source(self.source_id, self.owner, self.lease_ms)
            if tuple(getattr(src, name) for name in cursor_fields) != expected:
                raise CursorMoved
            apply(src)
            self._record_skipped(src)
            position = max(expected, new_position)
            for name, value in zip(cursor_fields, position, strict=True):
                setattr(src, name, value)
            src.heartbeat_at = now_ms()
            src.save(update_fields=[*cursor_fields, "lease_owner", "lease_until", "heartbeat_at"])
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
        for read in self.db.sessions_after(since, ""):
            done += len(read)
            batch = [r for r in read if self.recent_sessions.fresh(r.session_key, r.updated_at)]
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
                        self._newest(max(row.updated_at for row in batch))

                position = self._apply(fields, position, (last.updated_at, last.session_key), apply)
                self.recent_sessions.remember([(r.session_key, r.updated_at) for r in batch])
            self._tick("sessions", done)
        self.recent_sessions.prune(position[0])

    # --- transcript entries ---------------------------------------------------------------

    def _entries(self, start: MirrorSource) -> None:
        fields = ("entries_id",)
        position: tuple[Any, ...] = (start.entries_id,)
        done = 0
        for batch in self.db.entries_after(start.entries_id):
            last_id = batch[-1].id

            def apply(src: MirrorSource, batch: list[Any] = batch) -> None:
                report = self.result.report
                before = report.transcript_entries.created + report.transcript_entries.updated
                rows.warn_remapped(report, rows.apply_entries(batch, report))
                after = report.transcript_entries.created + report.transcript_entries.updated
                self.result.applied += after - before
                if after > before:
                    # Explicit upstream ids were inserted: move PostgreSQL's sequence past them
                    # so an entry written here meanwhile never collides.
                    rows.reset_entry_sequence()
                    self._newest(max(row.created_at for row in batch))

            position = self._apply(fields, position, (last_id,), apply)
            done += len(batch)
            self._tick("transcript entries", done)

    # --- receipts -------------------------------------------------------------------------

    def _receipts(self, start: MirrorSource) -> None:
        fields = ("receipts_updated_at", "receipts_key")
        position: tuple[Any, ...] = (start.receipts_updated_at, start.receipts_key)
        since = max(0, start.receipts_updated_at - OVERLAP_MS)
        done = 0
        for read in self.db.receipts_after(since, ""):
            done += len(read)
            batch = [
                r
                for r in read
                if self.recent_receipts.fresh(r.values["idempotency_key"], r.values["updated_at"])
            ]
            if batch:
                last = batch[-1].values

                def apply(src: MirrorSource, batch: list[Any] = batch) -> None:
                    self._apply_receipts(src, batch)

                position = self._apply(
                    fields, position, (last["updated_at"], last["idempotency_key"]), apply
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
            self._newest(max(c.values["updated_at"] for c in applied))
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

    def _newest(self, stamp: int) -> None:
        current = self.result.newest_source_ms
        self.result.newest_source_ms = stamp if current is None else max(current, stamp)


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
