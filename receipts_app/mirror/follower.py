"""The follower loop: poll the source, apply what changed, record the state, never crash.

Every poll ends in one of: ``idle`` (nothing changed: a stat and one PRAGMA), ``synced``,
``standby`` (another follower holds the lease), ``retry`` or ``error``. Errors are classified
(:func:`.watch.classify`), logged once when they start and once when they clear, recorded for
the overview, and retried on the next poll: a locked, truncated, corrupt, replaced or foreign
source, or a workspace that disappears, never stops the loop and never touches local history.
"""

from __future__ import annotations

import logging
import signal
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError, connection, transaction

from opensquilla_site.timeutil import now_ms
from sessions_app.gateways import DEFAULT_GATEWAY, Gateway, using_gateway

from .. import audit
from ..importer import ImportReport, ImportSourceError
from ..importer.rows import FileFacts
from ..importer.service import check_gateway_name, record_gateway_seen
from ..importer.source import SourceDatabase
from ..importer.targets import file_targets
from . import sync
from .models import MirroredTranscript, MirrorSource
from .reconcile import reconcile
from .state import HEARTBEAT_MS
from .sync import (
    MIRROR_ACTOR,
    CursorMoved,
    PassResult,
    RecentlyApplied,
    Standby,
    SyncPass,
    Targets,
    copy_all_files,
    lock_source,
    owner_id,
)
from .watch import SourceProblem, WatchedSource, classify

log = logging.getLogger("receipts_app.mirror")

RECONCILE_SECONDS = 300.0
_LEASE_FIELDS = ("lease_owner", "lease_until")
_CURSOR_FIELDS = (
    "sessions_updated_at",
    "sessions_key",
    "entries_id",
    "receipts_updated_at",
    "receipts_key",
)


class Follower:
    def __init__(
        self,
        *,
        db_path: Path,
        workspace: Path | None,
        checkpoint_root: Path | None,
        memory_template: str | None,
        interval: float = 1.0,
        lease_seconds: float | None = None,
        reconcile_seconds: float = RECONCILE_SECONDS,
        owner: str | None = None,
        progress: Callable[[str, int, int], None] | None = None,
        busy_timeout: float = 2.0,
        gateway: str = DEFAULT_GATEWAY,
    ) -> None:
        # Every row this follower applies belongs to ``gateway`` (sessions_app.gateways): each
        # poll runs inside using_gateway, and the source is keyed by (gateway, path).
        self.gateway = check_gateway_name(gateway)
        self.path = Path(db_path).expanduser().resolve()
        self.targets = Targets(
            workspace=Path(workspace).expanduser() if workspace else None,
            checkpoint_root=Path(checkpoint_root).expanduser() if checkpoint_root else None,
            memory_template=memory_template,
        )
        self.interval = interval
        self.lease_ms = int(1000 * (lease_seconds or max(30.0, interval * 5)))
        self.reconcile_ms = int(reconcile_seconds * 1000)
        self.owner = owner or owner_id()
        self.progress = progress
        self.watch = WatchedSource(self.path, busy_timeout=busy_timeout)
        self.source_id = self._source_row().pk
        self._opened: object | None = None
        self._problem: tuple[str, str] | None = None
        self._standby_logged = False
        self._last_heartbeat = 0
        self._lag_open = False  # the last pass measured a lag: the next idle look clears it
        self._last_reconcile = 0
        self._counts: tuple[int, int] | None = None
        self._workspace_missing = False
        self._schema_cookie: int | None = None
        self._recent_sessions = RecentlyApplied()
        self._recent_receipts = RecentlyApplied()
        self._strong_checked: dict[str, int] = {}
        self._strong_pending: dict[str, int] = {}
        self._strong_rows: dict[str, int] = {}

    # --- the loop ---------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None, *, max_polls: int | None = None) -> None:
        stop = stop or threading.Event()
        log.info("mirror: following %s every %.1fs as %s", self.path, self.interval, self.owner)
        polls = 0
        while not stop.is_set():
            try:
                self.poll()
            except Exception as exc:  # noqa: BLE001 - the loop must outlive any one poll
                # Ending here would stop every process honcho runs with it; the error is
                # logged with its traceback and shown, and the next poll tries again.
                log.exception("mirror: unexpected error while following %s", self.path)
                self.watch.close()
                self._opened = None
                self._record_unexpected(exc)
            polls += 1
            if max_polls is not None and polls >= max_polls:
                return
            stop.wait(self.interval)
        log.info("mirror: stopped following %s", self.path)

    def poll(self) -> str:
        with using_gateway(self.gateway):
            return self._poll()

    def _poll(self) -> str:
        try:
            changed = self.watch.changed()  # opens, or reopens a replaced/rewritten file
            db = self.watch.db
            assert db is not None
            if self._opened is not db:
                self._on_open()
                self._opened = db
            if changed:
                self._note_schema(db)
            self._check_workspace()
            src = MirrorSource.objects.get(pk=self.source_id)
            counts = (
                (db.count("sessions"), db.count("memory_durable_receipts")) if changed else None
            )
            due = self._reconcile_due(src, counts)
            if not changed and not due and src.initial_sync_done and not self._digest_due():
                self._heartbeat_if_due()
                return "idle"
            if due or not src.initial_sync_done:
                result = self._sync(src, db)
                self._reconcile(db)
                self._record_ok(result, initial=not src.initial_sync_done)
            else:
                # The usual pass: recorded in the pass's own last transaction.
                result = self._sync(src, db, record=True)
                self._after_ok(result)
            return "synced"
        except Standby as exc:
            self.watch.forget_version()
            if not self._standby_logged:
                log.info("mirror: %s is followed by %s; standing by", self.path, exc)
                self._standby_logged = True
            return "standby"
        except CursorMoved:
            self.watch.forget_version()
            return "retry"
        except (SourceProblem, ImportSourceError, sqlite3.Error) as exc:
            problem = classify(exc, self.path)
            if problem.code != "locked":
                self.watch.close()
                self._opened = None
            self.watch.forget_version()
            self._record_problem(problem)
            return "error"
        except MirrorSource.DoesNotExist:
            # Someone deleted this source's row (the admin, a reset): start it again.
            self.source_id = self._source_row().pk
            self.watch.forget_version()
            return "retry"
        except DatabaseError as exc:
            # Our own database failed (restart, lock timeout): drop the connection, retry.
            log.error("mirror: ledger database error, retrying: %s", exc)
            self.watch.forget_version()
            connection.close()
            return "error"

    # --- steps ------------------------------------------------------------------------------

    def _source_row(self) -> MirrorSource:
        Gateway.objects.get_or_create(
            name=self.gateway, defaults={"display_name": self.gateway, "source": str(self.path)}
        )
        src, _ = MirrorSource.objects.get_or_create(gateway_id=self.gateway, path=str(self.path))
        workspace = str(self.targets.workspace or "")
        if src.workspace != workspace or src.interval_seconds != self.interval:
            src.workspace = workspace
            src.interval_seconds = self.interval
            src.save(update_fields=["workspace", "interval_seconds"])
        return src

    def _on_open(self) -> None:
        """A (re)opened file: if it is not the file the cursor belongs to, start over."""
        identity = self.watch.identity
        db = self.watch.db
        assert db is not None
        record_gateway_seen(self.gateway, db)
        self._schema_cookie = db.schema_cookie()
        with transaction.atomic():
            src = lock_source(self.source_id, self.owner, self.lease_ms)
            fields = ["lease_owner", "lease_until"]
            rewound = db.max_entry_id() < src.entries_id
            if src.identity and (src.identity != identity or rewound):
                log.warning(
                    "mirror: %s was replaced by another file (%s); reading it from the start, "
                    "local history kept",
                    self.path,
                    "older content" if rewound else "new inode",
                )
                src.sessions_updated_at, src.sessions_key = 0, ""
                src.entries_id = 0
                src.receipts_updated_at, src.receipts_key = 0, ""
                src.initial_sync_done = False
                fields += [*_CURSOR_FIELDS, "initial_sync_done"]
                self._recent_sessions = RecentlyApplied()
                self._recent_receipts = RecentlyApplied()
                # Fingerprints of the old file: the first pass stores the new file's.
                MirroredTranscript.objects.filter(source_id=self.source_id).delete()
                self._strong_checked = {}
                self._strong_pending = {}
                self._strong_rows = {}
            if src.identity != identity:
                src.identity = identity
                fields.append("identity")
            src.save(update_fields=fields)
        self._counts = None

    def _digest_due(self) -> bool:
        """A touched session's digest comparison was put off and is due now (sync.py)."""
        now = now_ms()
        return any(
            now - at >= sync.strong_interval(self._strong_rows.get(sid, 0))
            for sid, at in self._strong_pending.items()
        )

    def _note_schema(self, db: SourceDatabase) -> None:
        """A gateway upgraded under a running follower migrates the file in place: SQLite's
        schema cookie moves, and the gateway's recorded schema version is read again."""
        cookie = db.schema_cookie()
        if cookie != self._schema_cookie:
            db.reread_columns()
            record_gateway_seen(self.gateway, db)
            self._schema_cookie = cookie
            # A migration may have deleted rows (0.5.5's V044 retires every flush and repair
            # receipt): the next pass reconciles, whatever the counts did meanwhile.
            self._last_reconcile = 0

    def _check_workspace(self) -> None:
        workspace = self.targets.workspace
        missing = workspace is not None and not workspace.is_dir()
        if missing and not self._workspace_missing:
            log.warning(
                "mirror: workspace %s is missing: receipts are still mirrored, files are not "
                "copied until it is back",
                workspace,
            )
        elif self._workspace_missing and not missing:
            log.info("mirror: workspace %s is back; copying its files", workspace)
            self._last_reconcile = 0  # the full walk runs with the next reconciliation
        self._workspace_missing = missing

    def _reconcile_due(self, src: MirrorSource, counts: tuple[int, int] | None) -> bool:
        dropped = (
            counts is not None
            and self._counts is not None
            and (counts[0] < self._counts[0] or counts[1] < self._counts[1])
        )
        if counts is not None:
            self._counts = counts
        if not src.initial_sync_done:
            return False  # the initial pass reconciles at its end anyway
        return dropped or now_ms() - self._last_reconcile >= self.reconcile_ms

    def _sync(self, src: MirrorSource, db: SourceDatabase, *, record: bool = False) -> PassResult:
        totals: dict[str, int] = {}
        if not src.initial_sync_done:
            self._set_phase("importing")
            totals = {
                "sessions": db.count("sessions"),
                "transcript entries": db.count("transcript_entries"),
                "receipts": db.count("memory_durable_receipts"),
            }
        result = SyncPass(
            source_id=self.source_id,
            db=db,
            owner=self.owner,
            lease_ms=self.lease_ms,
            targets=self.targets,
            progress=self.progress if not src.initial_sync_done else None,
            totals=totals,
            recent_sessions=self._recent_sessions,
            recent_receipts=self._recent_receipts,
            strong_checked=self._strong_checked,
            strong_pending=self._strong_pending,
            strong_rows=self._strong_rows,
        ).run(finish=self._note_passed if record else None)
        return result

    def _note_passed(self, src: MirrorSource, result: PassResult) -> list[str]:
        return self._note_ok(src, result, initial=False)

    def _reconcile(self, db: SourceDatabase) -> None:
        outcome = reconcile(
            source_id=self.source_id, db=db, owner=self.owner, lease_ms=self.lease_ms
        )
        if outcome.sessions_gone or outcome.receipts_gone:
            log.warning(
                "mirror: %d session(s) and %d receipt(s) are gone from %s; marked, kept here",
                outcome.sessions_gone,
                outcome.receipts_gone,
                self.path,
            )
        copy_all_files(self.targets, FileFacts(), ImportReport(source=str(self.path)))
        self._last_reconcile = now_ms()

    # --- state ------------------------------------------------------------------------------

    def _set_phase(self, phase: str) -> None:
        with transaction.atomic():
            src = lock_source(self.source_id, self.owner, self.lease_ms)
            src.phase = phase
            src.heartbeat_at = now_ms()
            src.save(update_fields=["phase", "heartbeat_at", "lease_owner", "lease_until"])

    def _workspace_warning(self) -> str:
        if not self._workspace_missing:
            return ""
        return (
            f"workspace {self.targets.workspace} is missing: receipts are mirrored, "
            "checkpoint and archive files are not copied until it is back"
        )

    def _record_ok(self, result: PassResult, *, initial: bool) -> None:
        """Record a finished pass in a transaction of its own (after a reconciliation)."""
        with transaction.atomic(), audit.acting_as(MIRROR_ACTOR):
            src = lock_source(self.source_id, self.owner, self.lease_ms)
            src.save(update_fields=[*self._note_ok(src, result, initial=initial), *_LEASE_FIELDS])
        self._after_ok(result)

    def _note_ok(self, src: MirrorSource, result: PassResult, *, initial: bool) -> list[str]:
        """On the locked row: the pass went well. Returns the fields it set."""
        now = now_ms()
        if src.error:
            log.info("mirror: %s readable again (%s cleared)", self.path, src.error_code)
        src.error, src.error_code, src.error_since = "", "", None
        src.warning = self._workspace_warning()
        src.phase = "following"
        src.heartbeat_at = now
        src.last_sync_at = now
        fields = ["error", "error_code", "error_since", "warning", "phase"]
        fields += ["heartbeat_at", "last_sync_at"]
        if result.applied:
            src.last_change_at = now
            src.rows_applied += result.applied
            fields += ["last_change_at", "rows_applied"]
        # Lag: how long the oldest change this pass found waiting had waited when applied; 0
        # when it found none, and after the initial import (caught up: docs/MIRROR.md, "Lag").
        waited = result.oldest_source_ms if result.applied and not initial else None
        lag = 0 if waited is None else max(0, now - waited)
        self._lag_open = lag > 0
        if src.lag_ms != lag:
            src.lag_ms = lag
            fields.append("lag_ms")
        if initial:
            src.initial_sync_done = True
            fields.append("initial_sync_done")
            report = result.report
            audit.record_event(
                receipt_id="",
                action="import",
                reason=f"mirror of {self.path}: initial import",
                details={
                    "source": str(self.path),
                    "sessions": report.sessions.line(),
                    "transcript_entries": report.transcript_entries.line(),
                    "receipts": report.receipts.line(),
                    "files": report.files.line(),
                },
            )
        Gateway.objects.filter(name=self.gateway).update(last_seen_at=now)
        return fields

    def _after_ok(self, result: PassResult) -> None:
        for warning in result.report.warnings:
            log.warning("mirror: %s", warning)
        self._problem = None
        self._standby_logged = False
        self._last_heartbeat = now_ms()
        if result.applied:
            log.info(
                "mirror: applied %d row(s) from %s (%d status change(s))",
                result.applied,
                self.path,
                result.status_changes,
            )

    def _heartbeat_if_due(self) -> None:
        now = now_ms()
        # The first idle look after a pass that measured a lag writes at once: caught up.
        if now - self._last_heartbeat < HEARTBEAT_MS and not self._lag_open:
            return
        with transaction.atomic():
            src = lock_source(self.source_id, self.owner, self.lease_ms)
            src.heartbeat_at = now
            src.last_sync_at = now  # nothing changed upstream: we are caught up
            src.lag_ms = 0  # and nothing waits to be applied
            src.warning = self._workspace_warning()
            src.save(
                update_fields=[
                    "heartbeat_at",
                    "last_sync_at",
                    "lag_ms",
                    "warning",
                    "lease_owner",
                    "lease_until",
                ]
            )
            Gateway.objects.filter(name=self.gateway).update(last_seen_at=now)
        self._last_heartbeat = now
        self._lag_open = False

    def _record_unexpected(self, exc: Exception) -> None:
        try:
            self._record_problem(SourceProblem("internal", f"unexpected error: {exc!r}"))
        except Exception:  # noqa: BLE001 - recording is best effort; the log has it
            connection.close()

    def _record_problem(self, problem: SourceProblem) -> None:
        key = (problem.code, problem.message)
        if key != self._problem:
            log.warning(
                "mirror: %s [%s]; local history kept, retrying", problem.message, problem.code
            )
            self._problem = key
        now = now_ms()
        try:
            with transaction.atomic():
                src = lock_source(self.source_id, self.owner, self.lease_ms)
                if src.error_code != problem.code:
                    src.error_since = now
                src.error = problem.message
                src.error_code = problem.code
                src.heartbeat_at = now
                src.warning = self._workspace_warning()
                src.save()
        except Standby:
            pass  # the follower holding the lease reports for this source
        self._last_heartbeat = now


def build_follower(
    *,
    db_path: Path,
    workspace: Path | None,
    target_workspace: Path | None = None,
    memory_workspace: str | None = None,
    interval: float | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    gateway: str = DEFAULT_GATEWAY,
) -> Follower:
    """A follower configured like the one-shot import (docs/IMPORT.md "Files"): checkpoint files
    to ``target_workspace`` or the gateway's root under ``OPENSQUILLA_CHECKPOINT_WORKSPACE``,
    raw archives to the memory workspace. Raises ``ImportSourceError`` when files would have
    nowhere to go or ``gateway`` is not a slug."""
    gateway = check_gateway_name(gateway)
    targets = file_targets(
        gateway, target_workspace=target_workspace, memory_workspace=memory_workspace
    )
    checkpoint_root = targets.checkpoint_root
    if workspace is not None and not checkpoint_root:
        raise ImportSourceError(
            "no target workspace: set OPENSQUILLA_CHECKPOINT_WORKSPACE or pass --target-workspace"
        )
    if interval is not None and interval <= 0:
        raise ImportSourceError("--interval must be a positive number of seconds")
    return Follower(
        db_path=db_path,
        workspace=workspace,
        checkpoint_root=checkpoint_root,
        memory_template=targets.memory_template,
        interval=interval or float(getattr(settings, "OPENSQUILLA_MIRROR_INTERVAL", 1.0)),
        progress=progress,
        gateway=gateway,
    )


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGTERM/SIGINT, so the loop ends between polls, never mid-batch."""
    stop = threading.Event()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    for sig in previous:
        signal.signal(sig, lambda *_: stop.set())
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
