"""Walk a gateway's checkpoint receipts in cycles and verify their files (docs/STATUSES.md#scrub).

A cycle goes through the receipts in id order from the cursor (``ScrubCursor``), so a run that
stops (its time budget spent, a worker killed) resumes where it was. Within a cycle a file whose
size and mtime are those of its last full read, and that was whole then, costs one ``stat``:
it is read in full again only when the full cycle is due (``OPENSQUILLA_SCRUB_FULL_CYCLE_SECONDS``).
Everything else is read in full, at most at ``OPENSQUILLA_SCRUB_READ_BYTES_PER_SECOND``.

What was found goes to ``CheckpointVerification``; the receipt's status changes only when the
verdict changes: ``checkpoint_saved`` → ``checkpoint_missing`` / ``hash_mismatch`` (at risk),
and back to ``checkpoint_saved`` when a later scrub finds the file whole. Each move is one
compare-and-set UPDATE with a ``scrub`` event, so a concurrent requeue or upsert wins.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from django.db import connection, transaction
from django.db.models import Q

from opensquilla_site.timeutil import now_ms
from sessions_app.gateways import check_served, using_gateway

from .. import audit
from ..models import CheckpointVerification, MemoryDurableReceipt, ScrubCursor
from ..statuses import CHECKPOINT_MISSING, CHECKPOINT_SAVED, SCRUB_VERDICT_STATUSES
from . import settings as scrub_settings
from .filecheck import Found
from .readers import ReaderGone, ReaderProcesses
from .throttle import Throttle
from .verify import (
    OK,
    Verification,
    checkpoint_root,
    resolved_root,
    verify_file,
    verify_files,
    wanted,
)

logger = logging.getLogger(__name__)
BATCH = 1000
# Files read at once during a full read (threads; the throttle holds them all to one rate). A
# cold checkpoint's read is mostly waiting for the disk, and the disk serves several at once:
# eight readers kept more of it busy than four (docs/PERFORMANCE.md#checkpoint-scrub).
READERS = 8
# Files one reader task verifies in a row: one future per few files, not one per file.
READ_CHUNK = 32
# Files one request to a reader process carries (``readers``): 128 read faster than 64 (and
# than 250) on the bench's cold set, with batches of 1,000.
PROCESS_CHUNK = 128
# Seconds a reader process has to answer for a chunk before the scrub reads it itself.
READER_ANSWER_SECONDS = 120.0
SCRUB_ACTION = "scrub"


class _Receipt(NamedTuple):
    """What a full read needs of a receipt (read as a tuple: no model built per file)."""

    id: int
    gateway_id: str
    receipt_id: str
    session_key: str
    session_id: str
    turn_id: str | None
    agent_id: str
    source_path: str | None
    content_hash: str | None
    coverage_entry_count: int | None
    status: str
    reason: str | None
    updated_at: int

    @property
    def pk(self) -> int:
        return self.id


class _Kept(NamedTuple):
    """The receipt's verification as stored (None columns: it has none yet)."""

    outcome: str | None
    detail: str | None
    agent_id: str | None
    read_at: int | None
    size: int | None
    mtime_ns: int | None
    moved_from: str | None
    parsed_hash: str | None


# One joined read per batch: the receipts and their verifications.
_READ = (
    *_Receipt._fields,
    *(f"verification__{name}" for name in _Kept._fields),
)
# The columns of CheckpointVerification the scrub writes, in this order.
_STORED = (
    "receipt_id",
    "gateway_id",
    "agent_id",
    "verified_at",
    "read_at",
    "outcome",
    "detail",
    "size",
    "mtime_ns",
    "moved_from",
    "parsed_hash",
)


@dataclass
class ScrubReport:
    """What one run did; ``files_read`` and ``bytes_read`` count full reads only."""

    gateway: str
    agent: str = ""
    state: str = "idle"  # idle (no cycle due), running (budget spent), done (cycle finished)
    full: bool = False
    checked: int = 0
    stat_only: int = 0
    files_read: int = 0
    bytes_read: int = 0
    ok: int = 0
    missing: int = 0
    damaged: int = 0
    moved_at_risk: int = 0
    restored: int = 0
    unsafe: list[dict[str, Any]] = field(default_factory=list)  # the first 100 found unsafe
    seconds: float = 0.0

    @property
    def found_unsafe(self) -> int:
        return self.missing + self.damaged

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _selection(gateway: str, agent: str) -> Any:
    """The receipts a scrub verifies: saved checkpoints, and the ones it found unsafe itself
    (so it can find them whole again)."""
    qs = MemoryDurableReceipt.objects.filter(gateway_id=gateway, scope="checkpoint").filter(
        Q(status=CHECKPOINT_SAVED)
        | Q(status__in=SCRUB_VERDICT_STATUSES, verification__moved_from__gt="")
    )
    return qs.filter(agent_id=agent) if agent else qs


def _begin_cycle(cursor: ScrubCursor, now: int, *, force: bool, full: bool | None) -> bool:
    """Resume the cycle under way, or start one when due; ``force`` starts one from the first
    receipt now (the on-demand scrub). False when the cursor has nothing to do."""
    if cursor.cycle_started_at is not None and not force:
        return True
    since = cursor.last_cycle_started_at
    if not force and since is not None and now - since < scrub_settings.cycle_seconds() * 1000:
        return False
    last_full = cursor.last_full_cycle_started_at
    full_due = last_full is None or now - last_full >= scrub_settings.full_cycle_seconds() * 1000
    cursor.cycle_started_at = now
    cursor.cycle_full = full if full is not None else full_due
    cursor.after_id = 0
    return True


def _record(
    row: _Receipt, kept: _Kept | None, found: Verification, now: int, report: ScrubReport
) -> tuple[Any, ...]:
    """Move the receipt's status when the verdict changed; returns the verification to store
    (the columns of ``_STORED``)."""
    moved_from = (kept.moved_from or "") if kept is not None else ""
    wanted = found.status if found.outcome != OK else (moved_from or None)
    if found.outcome == OK:
        report.ok += 1
        if row.status in SCRUB_VERDICT_STATUSES and moved_from:
            if _move(row, moved_from, None, found, "restored"):
                report.restored += 1
                moved_from = ""
        else:
            moved_from = ""
    elif wanted is not None:
        if found.status == CHECKPOINT_MISSING:
            report.missing += 1
        else:
            report.damaged += 1
        if len(report.unsafe) < 100:
            report.unsafe.append(
                {"receipt_id": row.receipt_id, "outcome": found.outcome, "detail": found.detail}
            )
        if row.status != wanted:
            if _move(row, wanted, found.reason, found, "at_risk"):
                report.moved_at_risk += int(row.status == CHECKPOINT_SAVED)
                moved_from = moved_from or row.status
    read_at: int | None
    if found.bytes_read or found.outcome == OK:
        read_at, size, mtime_ns = now, found.size, found.mtime_ns
    elif kept is not None:
        read_at, size, mtime_ns = kept.read_at, kept.size, kept.mtime_ns
    else:
        read_at = size = mtime_ns = None
    parsed_hash = found.digest if found.parsed else ((kept.parsed_hash or "") if kept else "")
    return (
        row.id,
        str(row.gateway_id),
        row.agent_id,
        now,
        read_at,
        found.outcome,
        found.detail[:2000],
        size,
        mtime_ns,
        moved_from,
        parsed_hash,
    )


def _unchanged(stored: tuple[Any, ...], kept: _Kept | None) -> bool:
    """Whether a verification differs from the stored one only in when it was made."""
    if kept is None or kept.outcome is None:
        return False
    (_, _, agent_id, _, _, outcome, detail, size, mtime_ns, moved_from, parsed_hash) = stored
    return (agent_id, outcome, detail, size, mtime_ns, moved_from, parsed_hash) == (
        kept.agent_id,
        kept.outcome,
        kept.detail,
        kept.size,
        kept.mtime_ns,
        kept.moved_from,
        kept.parsed_hash,
    )


def _store(found: list[tuple[Any, ...]], kept: dict[int, _Kept], now: int) -> None:
    """A batch's verifications, in as few statements as it takes (the caller's transaction).

    A file found as it was last time (the common case of a full cycle) only has its times
    moved: one UPDATE for all of them. The others (new, or changed) are one upsert, run as one
    ``executemany``: building a model and compiling an INSERT per row cost more CPU than the
    reads they record."""
    if not found:
        return
    touched: list[int] = []  # only verified_at and read_at move (to ``now``)
    written: list[tuple[Any, ...]] = []
    for stored in found:
        receipt_id, read_at = stored[0], stored[4]
        if read_at == now and _unchanged(stored, kept.get(receipt_id)):
            touched.append(receipt_id)
        else:
            written.append(stored)
    if touched:
        _touch(touched, now)
    if written:
        _upsert(written)


def _touch(ids: list[int], now: int) -> None:
    """Move ``verified_at`` and ``read_at`` of these verifications to ``now``: one UPDATE,
    written out (the ORM's ``__in`` prepares each of a batch's ids in Python)."""
    quote = connection.ops.quote_name
    table = quote(CheckpointVerification._meta.db_table)
    marks = ", ".join(["%s"] * len(ids))
    sql = (
        f"UPDATE {table} SET {quote('verified_at')} = %s, {quote('read_at')} = %s "  # noqa: S608
        f"WHERE {quote('receipt_id')} IN ({marks})"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [now, now, *ids])


def _upsert(rows: Iterable[tuple[Any, ...]]) -> None:
    """INSERT … ON CONFLICT (receipt_id) DO UPDATE, one statement run over every row (SQLite
    and PostgreSQL both have it), so a verification stored by a concurrent run is replaced."""
    quote = connection.ops.quote_name
    table = quote(CheckpointVerification._meta.db_table)
    columns = ", ".join(quote(c) for c in _STORED)
    updates = ", ".join(f"{quote(c)} = excluded.{quote(c)}" for c in _STORED[1:])
    # Names from the model's own metadata, values as parameters: nothing from outside.
    values = ", ".join(["%s"] * len(_STORED))
    sql = (
        f"INSERT INTO {table} ({columns}) VALUES ({values}) "  # noqa: S608
        f"ON CONFLICT ({quote('receipt_id')}) DO UPDATE SET {updates}"
    )
    with connection.cursor() as cursor:
        cursor.executemany(sql, list(rows))


def _move(
    row: _Receipt, status: str, reason: str | None, found: Verification, outcome: str
) -> bool:
    """Compare-and-set the receipt's status; False when it changed under us (left alone)."""
    stamp = max(now_ms(), row.updated_at + 1)
    with transaction.atomic():
        moved = MemoryDurableReceipt.objects.filter(
            pk=row.pk, status=row.status, updated_at=row.updated_at
        ).update(status=status, reason=reason, updated_at=stamp)
        if not moved:
            return False
        audit.record_event(
            receipt_id=row.receipt_id,
            session_key=row.session_key,
            action=SCRUB_ACTION,
            from_status=row.status,
            to_status=status,
            outcome=outcome,
            reason=reason or "the checkpoint file is whole again",
            details={"verification": found.to_dict()},
            gateway=row.gateway_id,
        )
    logger.warning("scrub: receipt %s %s -> %s (%s)", row.receipt_id, row.status, status, reason)
    return True


# The cheap walk reads tuples, not models: (id, source_path, last outcome, size, mtime_ns).
_WALK = (
    "id",
    "source_path",
    "verification__outcome",
    "verification__size",
    "verification__mtime_ns",
)


def _plain_relative(source_path: str) -> bool:
    """A relative path with no ``..``: its file is ``root/source_path`` without resolving (the
    full read still resolves it and refuses one that leaves the workspace)."""
    return not source_path.startswith(("/", "\\")) and ".." not in source_path.split("/")


def _unchanged_ids(
    walk: list[tuple[Any, ...]], root: Path | None, report: ScrubReport
) -> list[int]:
    """Count the rows whose file is as it was at its last whole read (one ``stat`` each, no
    read, nothing written); return the ids that need a full read."""
    need: list[int] = []
    prefix = f"{root}{os.sep}" if root is not None else ""
    for pk, source_path, outcome, size, mtime_ns in walk:
        report.checked += 1
        if outcome == OK and root is not None and source_path:
            if _plain_relative(source_path):
                try:
                    info = os.stat(prefix + source_path)
                except OSError:
                    info = None
                if info is not None and info.st_size == size and info.st_mtime_ns == mtime_ns:
                    report.stat_only += 1
                    report.ok += 1
                    continue
        need.append(pk)
    return need


@dataclass
class _Reads:
    """A batch's full reads, under way on the readers."""

    rows: list[_Receipt]
    kept: dict[int, _Kept]
    chunks: list[list[_Receipt]]
    results: Iterator[list[Verification]]


def _read_back(ids: list[int]) -> list[tuple[Any, ...]]:
    """The joined columns (``_READ``) of the receipts a cycle's stat found changed."""
    if not ids:
        return []
    return list(MemoryDurableReceipt.objects.filter(pk__in=ids).order_by("id").values_list(*_READ))


def _start_reads(
    joined: list[tuple[Any, ...]],
    root: Path | None,
    throttle: Throttle,
    pool: ThreadPoolExecutor,
    processes: ReaderProcesses | None,
) -> _Reads | None:
    """Hand the files of these receipts (``_READ`` tuples) to the readers: the reader
    processes when the run has them, else this process's threads. ``_finish_reads`` records
    what they found."""
    if not joined:
        return None
    rows: list[_Receipt] = []
    kept: dict[int, _Kept] = {}
    width = len(_Receipt._fields)
    for values in joined:
        row = _Receipt._make(values[:width])
        rows.append(row)
        if values[width] is not None:
            kept[row.id] = _Kept._make(values[width:])

    def parsed(row: _Receipt) -> str:
        verification = kept.get(row.id)
        return (verification.parsed_hash or "") if verification is not None else ""

    def read(chunk: list[_Receipt]) -> list[Verification]:
        if throttle.rate > 0:  # one file after another, each read held to the rate
            return [
                verify_file(row, root, parsed_hash=parsed(row), on_read=throttle) for row in chunk
            ]
        return verify_files([wanted(row, parsed(row)) for row in chunk], root)

    # Several files are read at once: a cold file's read is mostly waiting for the disk, and
    # reads and hashing release the GIL. A reader takes a few files in a row (one future per
    # chunk, not per file).
    if processes is None or root is None:
        chunks = [rows[i : i + READ_CHUNK] for i in range(0, len(rows), READ_CHUNK)]
        return _Reads(rows, kept, chunks, pool.map(read, chunks))
    # A reader process asks the disk for a whole request's files at once: larger requests
    # keep more of the disk busy, and cost fewer answers.
    chunks = [rows[i : i + PROCESS_CHUNK] for i in range(0, len(rows), PROCESS_CHUNK)]
    asked = [_ask(processes, [wanted(row, parsed(row)) for row in chunk]) for chunk in chunks]
    results = (_collect(processes, a, chunk, read) for a, chunk in zip(asked, chunks, strict=True))
    return _Reads(rows, kept, chunks, results)


def _ask(processes: ReaderProcesses, files: list[Any]) -> Future[list[Found]] | None:
    try:
        return processes.submit(files)
    except ReaderGone:
        return None  # no reader process left: ``_collect`` reads the chunk here


def _collect(
    processes: ReaderProcesses,
    asked: Future[list[Found]] | None,
    chunk: list[_Receipt],
    read: Any,
) -> list[Verification]:
    """A chunk's verifications from its reader process; read here when it has none to give
    (it died, could not start, or did not answer in time), so no file goes unverified."""
    if asked is not None:
        try:
            found = processes.answer(asked, READER_ANSWER_SECONDS)
            return [Verification.of(one) for one in found]
        except ReaderGone as exc:
            logger.warning("scrub: %s; reading its files in this process", exc)
    result: list[Verification] = read(chunk)
    return result


def _finish_reads(reads: _Reads | None, report: ScrubReport, cursor: ScrubCursor) -> None:
    """Record each outcome, in id order, as soon as its chunk is in (the readers go on with
    the files after it), then store the batch and the cursor's place in one transaction."""
    if reads is None:
        ScrubCursor.objects.filter(pk=cursor.pk).update(after_id=cursor.after_id)
        return
    found: list[tuple[Any, ...]] = []
    now = now_ms()
    for chunk, results in zip(reads.chunks, reads.results, strict=True):
        for row, result in zip(chunk, results, strict=True):
            if result.bytes_read:
                report.files_read += 1
                report.bytes_read += result.bytes_read
            found.append(_record(row, reads.kept.get(row.id), result, now, report))
    with transaction.atomic():
        _store(found, reads.kept, now)
        ScrubCursor.objects.filter(pk=cursor.pk).update(after_id=cursor.after_id)


def scrub_checkpoints(
    gateway: str,
    agent: str | None = None,
    *,
    force: bool = False,
    full: bool | None = None,
    seconds: float | None = None,
    rate: float | None = None,
    root: Path | None = None,
    sleep: Any = time.sleep,
) -> ScrubReport:
    """One run of ``gateway``'s scrub (one agent's, with ``agent``), on the process that serves
    the gateway (``MisroutedWork`` elsewhere: its files are on another host).

    ``force``: start a cycle from the first receipt now, due or not (the on-demand scrub). ``full``: this
    cycle reads every file in full (default: when the full cycle is due). ``seconds``: the time
    budget (default ``OPENSQUILLA_SCRUB_RUN_SECONDS``; 0: until the cycle ends). ``rate``:
    bytes/s (default the setting; 0: unthrottled). ``root``: the checkpoint workspace.
    """
    check_served(gateway, what=f"the checkpoint scrub of gateway {gateway}")
    agent = agent or ""
    started = time.monotonic()
    budget = scrub_settings.run_seconds() if seconds is None else seconds
    throttle = Throttle(
        scrub_settings.read_bytes_per_second() if rate is None else rate, sleep=sleep
    )
    root = root if root is not None else checkpoint_root()
    resolved_root.cache_clear()  # resolved once a run: a remounted workspace is seen next run
    report = ScrubReport(gateway=gateway, agent=agent)
    with using_gateway(gateway), audit.acting_as(audit.WORKER):
        cursor, _ = ScrubCursor.objects.get_or_create(gateway_id=gateway, agent_id=agent)
        now = now_ms()
        if not _begin_cycle(cursor, now, force=force, full=full):
            report.seconds = time.monotonic() - started
            return report
        report.full = cursor.cycle_full
        report.state = "running"
        receipts = _selection(gateway, agent).order_by("id")
        # A full cycle reads every file: its walk reads what the reads need at once. Any other
        # walks the few columns a stat needs, and reads back the rows whose file changed.
        walk = receipts.values_list(*(_READ if cursor.cycle_full else _WALK))
        walked_to = cursor.after_id
        with (
            ThreadPoolExecutor(max_workers=READERS, thread_name_prefix="scrub") as pool,
            _reader_processes(root, throttle.rate) as processes,
        ):
            # One batch's files are read while the one before it is recorded and stored, so
            # the readers (and the disk) do not wait for the database between batches.
            pending: _Reads | None = None
            while True:
                rows = list(walk.filter(id__gt=walked_to)[:BATCH])
                if cursor.cycle_full:
                    report.checked += len(rows)
                    reads = _start_reads(rows, root, throttle, pool, processes)
                else:
                    need = _unchanged_ids(rows, root, report)
                    joined = _read_back(need)
                    reads = _start_reads(joined, root, throttle, pool, processes)
                # The batch before this one is stored with the cursor after it: a run that
                # stops now resumes there.
                cursor.after_id = walked_to
                _finish_reads(pending, report, cursor)
                pending = reads
                if rows:
                    walked_to = rows[-1][0]
                last = len(rows) < BATCH
                if last or (budget and time.monotonic() - started >= budget):
                    cursor.after_id = walked_to
                    if pending is not None:
                        _finish_reads(pending, report, cursor)
                    if last:
                        _end_cycle(cursor, now_ms())
                        report.state = "done"
                    break
        report.seconds = round(time.monotonic() - started, 3)
        cursor.last_run = {k: v for k, v in report.to_dict().items() if k != "unsafe"}
        cursor.save()
    return report


@contextlib.contextmanager
def _reader_processes(root: Path | None, rate: float) -> Iterator[ReaderProcesses | None]:
    """The run's reader processes: for an unthrottled run only (a throttled one reads far
    below what this process's threads do), none when ``OPENSQUILLA_SCRUB_READER_PROCESSES``
    is 0. They start at the first file read, and end with the run."""
    count = scrub_settings.reader_processes()
    if root is None or rate > 0 or count < 1:
        yield None
        return
    with ReaderProcesses(root, processes=count) as processes:
        yield processes


def _end_cycle(cursor: ScrubCursor, now: int) -> None:
    cursor.last_cycle_started_at = cursor.cycle_started_at
    cursor.last_cycle_at = now
    if cursor.cycle_full:
        cursor.last_full_cycle_started_at = cursor.cycle_started_at
        cursor.last_full_cycle_at = now
        _forget_gone(cursor.gateway_id)
    cursor.cycle_started_at = None
    cursor.cycle_full = False
    cursor.after_id = 0


def _forget_gone(gateway: str) -> None:
    """Drop the verifications of receipts the scrub no longer verifies (purged with their
    session, recovered by a retake), once a full cycle, so a summary never counts them."""
    live = MemoryDurableReceipt.objects.filter(gateway_id=gateway, scope="checkpoint").filter(
        Q(status=CHECKPOINT_SAVED) | Q(status__in=SCRUB_VERDICT_STATUSES)
    )
    CheckpointVerification.objects.filter(gateway_id=gateway).exclude(
        receipt_id__in=live.values("id")
    ).delete()
