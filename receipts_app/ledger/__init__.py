"""The durable receipt ledger: OpenSquilla's storage API on the Django ORM (docs/UPSTREAM.md#the-ledger).

The hot paths (single-row upsert and update, the exact coverage lookup, the bulk upsert) run
prebuilt parameterised SQL from :mod:`.fastsql`; the rest is ORM.

Contracts kept from upstream:
- ``upsert`` is one ``INSERT … ON CONFLICT (gateway_id, idempotency_key) DO UPDATE``, so two
  writers of one key can never both insert. ``receipt_id``, ``idempotency_key`` and
  ``created_at`` are never overwritten; ``updated_at`` is always stamped.
- The generation fence (``expected_session_id``) is read in the same transaction as the write,
  under a row lock on PostgreSQL and the IMMEDIATE write lock on SQLite.
- ``claim`` is a single conditional UPDATE: concurrent claimers pass a row once.
Every function has an ``a``-prefixed async twin.

Gateways (``sessions_app.gateways``): every write goes to the current gateway, and an address
by session key, session id or idempotency key reads the current gateway's rows (``here()``);
the repair queue and the recent-rows list span every gateway unless an edge chose one.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.db.models.functions import Substr

from opensquilla_site.exceptions import GenerationChanged
from opensquilla_site.prepared_sql import write_transaction
from opensquilla_site.timeutil import now_ms
from sessions_app.gateways import current_gateway
from sessions_app.keys import agent_id_for_session_key, canonicalize_session_key
from sessions_app.models import Session

from .. import audit
from ..models import MemoryDurableReceipt, new_receipt_id
from ..receipt_ids import check_identifier_columns
from ..statuses import REPAIR_PENDING, REPAIR_QUEUE_STATUSES, REPAIR_RUNNING
from . import fastsql, retry
from .columns import LEDGER_FIELDS, UPDATABLE_FIELDS


def live_session_id(session_key: str, *, for_update: bool = False) -> str | None:
    """The live generation of ``session_key``; None when the session does not exist."""
    sessions = Session.objects.here().filter(session_key=session_key)
    if for_update:
        sessions = sessions.select_for_update()
    return sessions.values_list("session_id", flat=True).first()


def generation_changed(
    session_key: str, expected_session_id: str, *, for_update: bool = False
) -> bool:
    """THE generation fence: has ``session_key`` been reset or deleted since ``expected``?

    Every fenced path asks this (the ledger's writes, the requeued checkpoint task, the
    requeue rules); ``for_update`` locks the session row so the answer holds until commit.
    """
    return live_session_id(session_key, for_update=for_update) != expected_session_id


def fence_generation(session_key: str, expected_session_id: str) -> None:
    """Raise ``GenerationChanged`` unless the live session is still ``expected_session_id``.

    Must run inside the write's transaction: the session row stays locked until commit, so a
    reset or delete cannot slip in between the check and the write.
    """
    if generation_changed(session_key, expected_session_id, for_update=True):
        raise GenerationChanged(session_key)


def _check_generation_fence(session_key: str, session_id: str, expected_session_id: str) -> None:
    # A row of another generation than the one the caller fences on is fenced by definition.
    if session_id != expected_session_id:
        raise GenerationChanged(session_key)
    fence_generation(session_key, expected_session_id)


def _prepare_for_write(
    receipt: MemoryDurableReceipt, stamp_ms: int, *, keep_stamps: bool = False
) -> dict[str, Any]:
    """Canonicalise and stamp ``receipt`` in place (as upstream does); return the row to write.

    ``keep_stamps`` keeps the receipt's own ``updated_at`` (rows copied from an OpenSquilla
    ledger carry upstream's stamp, which is evidence and the mirror's change marker)."""
    receipt.session_key = canonicalize_session_key(receipt.session_key)
    receipt.gateway_id = current_gateway()
    if not keep_stamps or receipt.updated_at is None:
        receipt.updated_at = stamp_ms
    if not receipt.idempotency_key:
        raise ValueError("idempotency_key is required")
    if not receipt.receipt_id:
        receipt.receipt_id = new_receipt_id()
    if receipt.created_at is None:
        receipt.created_at = stamp_ms
    values = {name: getattr(receipt, name) for name in LEDGER_FIELDS}
    values["agent_id"] = agent_id_for_session_key(receipt.session_key) or ""
    values["resolved_by_receipt_id"] = receipt.resolved_by_receipt_id
    values["gateway_id"] = receipt.gateway_id
    # Before any database work: a key or id with a line break cannot be linked or echoed.
    check_identifier_columns(values)
    return values


def upsert_memory_durable_receipt(
    receipt: MemoryDurableReceipt, *, expected_session_id: str | None = None
) -> MemoryDurableReceipt:
    """Insert the receipt, or overwrite the mutable columns of the row with its key.

    Returns the stored row: on a conflict it carries the original ``receipt_id`` and
    ``created_at``. With ``expected_session_id`` the write is fenced on the live generation
    and raises ``GenerationChanged`` (a ``KeyError``, as upstream) when it moved. A status
    change of an existing row is recorded as a ``status_change`` event in the same transaction.
    """
    stamp = now_ms()
    row = _prepare_for_write(receipt, stamp)
    if expected_session_id is None and fastsql.is_postgres():
        # One statement (write + audit) is a transaction on its own: no BEGIN/COMMIT trips.
        return fastsql.upsert(row, stamp)
    if expected_session_id is None:
        with write_transaction():
            return fastsql.upsert(row, stamp)
    with transaction.atomic():
        _check_generation_fence(row["session_key"], row["session_id"], expected_session_id)
        return fastsql.upsert(row, stamp)


def bulk_upsert_memory_durable_receipts(
    receipts: Sequence[MemoryDurableReceipt], *, keep_stamps: bool = False
) -> list[MemoryDurableReceipt]:
    """Upsert many unfenced receipts in one transaction; returns the stored rows in input order.

    A key repeated inside one batch keeps its last values, as sequential upserts would. Rows
    are written in key order (``retry.lock_order``, the order plan batches lock in too), so
    overlapping concurrent writers take their row locks in one order; a deadlock or
    serialization failure that happens anyway is retried with backoff (``retry``).
    ``keep_stamps=True`` (the OpenSquilla import and mirror) keeps each row's ``updated_at``.
    """
    stamp = now_ms()
    # A key is unique within its gateway: (gateway, key) is the row, and its lock order.
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for receipt in receipts:
        row = _prepare_for_write(receipt, stamp, keep_stamps=keep_stamps)
        latest[(row["gateway_id"], row["idempotency_key"])] = row
    ordered = [latest[key] for key in sorted(latest)]
    written = retry.atomic_retrying(lambda: fastsql.bulk_upsert(ordered))
    stored = {(str(r.gateway_id), r.idempotency_key): r for r in written}
    return [stored[(str(r.gateway_id), r.idempotency_key)] for r in receipts]


def update_memory_durable_receipt(receipt_id: str, /, **fields: Any) -> MemoryDurableReceipt:
    """Update named columns of one row; ``updated_at`` defaults to now.

    Raises ``ValueError`` for unknown field names (before any DB work) and ``KeyError`` when
    no row has ``receipt_id``. A status change is recorded as a ``status_change`` event.
    """
    unknown = sorted(set(fields) - UPDATABLE_FIELDS)
    if unknown:
        raise ValueError(f"Unknown memory durable receipt fields: {', '.join(unknown)}")
    if "session_key" in fields:
        fields["session_key"] = canonicalize_session_key(fields["session_key"])
        fields["agent_id"] = agent_id_for_session_key(fields["session_key"]) or ""
    check_identifier_columns(fields)
    stamp = now_ms()
    if fields.get("updated_at") is None:
        fields["updated_at"] = stamp
    if fastsql.is_postgres():
        # One statement: lock, update, audit.
        row = fastsql.update(receipt_id, fields, stamp)
    else:
        with write_transaction():
            row = fastsql.update(receipt_id, fields, stamp)
    if row is None:
        raise KeyError(f"Memory durable receipt not found: {receipt_id}")
    return row


def _apply_limit(qs: QuerySet[MemoryDurableReceipt], limit: int) -> list[MemoryDurableReceipt]:
    # SQLite semantics kept: 0 returns nothing, a negative limit means no limit.
    if limit == 0:
        return []
    if limit < 0:
        return list(qs)
    return list(qs[:limit])


# The longest prefix matched with LIKE (an index can serve it); longer ones compare exactly.
LIKE_PREFIX_MAX = 4000


def literal_prefix(
    qs: QuerySet[MemoryDurableReceipt], field: str, prefix: str
) -> QuerySet[MemoryDurableReceipt]:
    """Filter ``field`` by a literal, case-sensitive prefix.

    ``startswith`` escapes ``%`` and ``_`` but is case-insensitive on SQLite, so an exact
    substring comparison is added, as upstream's ``substr(col, 1, len) = prefix``.
    """
    if not prefix:
        return qs
    alias = f"_{field}_prefix"
    exact = qs.alias(**{alias: Substr(field, 1, len(prefix))}).filter(**{alias: prefix})
    if len(prefix) > LIKE_PREFIX_MAX:
        # SQLite refuses a LIKE pattern over 50,000 bytes ("pattern too complex"); a prefix
        # that long narrows nothing an index would, so the exact comparison alone decides.
        return exact
    return exact.filter(**{f"{field}__startswith": prefix})


def list_memory_durable_receipts(
    *,
    session_key: str | None = None,
    session_id: str | None = None,
    scope: str | None = None,
    status: str | None = None,
    coverage_turn_id: str | None = None,
    coverage_hash: str | None = None,
    coverage_entry_count: int | None = None,
    idempotency_key: str | None = None,
    limit: int = 100,
) -> list[MemoryDurableReceipt]:
    """Equality filters (ANDed) in SQL, oldest first (``created_at, id``)."""
    if session_key is not None:
        session_key = canonicalize_session_key(session_key)
    coverage = (
        current_gateway(),
        session_key,
        session_id,
        scope,
        status,
        coverage_turn_id,
        coverage_hash,
        coverage_entry_count,
    )
    if limit > 0 and idempotency_key is None and None not in coverage:
        # The checkpoint's "already covered?" probe: a fixed shape, so a prebuilt statement.
        return fastsql.coverage_lookup(coverage, limit)
    filters: dict[str, Any] = {}
    if session_key is not None:
        filters["session_key"] = session_key
    for name, value in (
        ("session_id", session_id),
        ("scope", scope),
        ("status", status),
        ("coverage_turn_id", coverage_turn_id),
        ("coverage_hash", coverage_hash),
        ("coverage_entry_count", coverage_entry_count),
        ("idempotency_key", idempotency_key),
    ):
        if value is not None:
            filters[name] = value
    qs = MemoryDurableReceipt.objects.all()
    if session_key is not None or session_id is not None or idempotency_key is not None:
        qs = qs.here()  # an address by a gateway's own identifier
    return _apply_limit(qs.filter(**filters).order_by("created_at", "id"), limit)


def due_q(now: int) -> Q:
    return Q(next_retry_at_ms__isnull=True) | Q(next_retry_at_ms__lte=now)


def list_memory_repair_receipts(
    *,
    statuses: Iterable[str] = REPAIR_QUEUE_STATUSES,
    limit: int,
    due_before_ms: int | None = None,
    path: str | None = None,
    session_key_prefix: str | None = None,
) -> list[MemoryDurableReceipt]:
    """The repair queue: NULL ``next_retry_at_ms`` first, then by retry time, age and id."""
    status_list = list(statuses)
    if limit <= 0 or not status_list:
        return []
    qs: QuerySet[MemoryDurableReceipt] = MemoryDurableReceipt.objects.filter(status__in=status_list)
    if due_before_ms is not None:
        qs = qs.filter(due_q(due_before_ms))
    if path is not None:
        qs = qs.filter(Q(source_path=path) | Q(target_path=path))
    if session_key_prefix:
        qs = literal_prefix(qs, "session_key", session_key_prefix)
    qs = qs.order_by(F("next_retry_at_ms").asc(nulls_first=True), "created_at", "id")
    return list(qs[:limit])


def list_recent_memory_durable_receipts(
    *, limit: int, session_key_prefix: str | None = None
) -> list[MemoryDurableReceipt]:
    if limit <= 0:
        return []
    qs: QuerySet[MemoryDurableReceipt] = MemoryDurableReceipt.objects.all()
    if session_key_prefix:
        qs = literal_prefix(qs, "session_key", session_key_prefix)
    return list(qs.order_by("-created_at", "-id")[:limit])


def memory_durable_receipt_exists_for_path(
    path: str, *, session_key_prefix: str | None = None
) -> bool:
    # The workspace files are the current gateway's.
    qs: QuerySet[MemoryDurableReceipt] = MemoryDurableReceipt.objects.here().filter(
        Q(source_path=path) | Q(target_path=path)
    )
    if session_key_prefix:
        qs = literal_prefix(qs, "session_key", session_key_prefix)
    return qs.exists()


def claim_memory_repair_receipt(
    receipt_id: str,
    *,
    eligible_statuses: Iterable[str] = REPAIR_QUEUE_STATUSES,
    claimed_status: str = REPAIR_RUNNING,
    now_ms: int,
) -> MemoryDurableReceipt | None:
    """Atomically move one due, queued row to ``claimed_status``; None if another got it.

    ``attempt_count`` is untouched: failure accounting happens when the attempt ends.
    """
    eligible = list(eligible_statuses)
    if not eligible:
        return None
    with transaction.atomic():
        source = (
            MemoryDurableReceipt.objects.filter(receipt_id=receipt_id)
            .values_list("status", flat=True)
            .first()
        )
        changed = (
            MemoryDurableReceipt.objects.filter(receipt_id=receipt_id, status__in=eligible)
            .filter(due_q(now_ms))
            .update(status=claimed_status, updated_at=now_ms)
        )
        if changed != 1:
            return None
        row = MemoryDurableReceipt.objects.get(receipt_id=receipt_id)
        audit.record_event(
            receipt_id=row.receipt_id,
            session_key=row.session_key,
            action="claim",
            from_status=source,
            to_status=claimed_status,
            at_ms=now_ms,
            gateway=row.gateway_id,
        )
        return row


def recover_stale_memory_repair_claims(
    *,
    running_status: str = REPAIR_RUNNING,
    pending_status: str = REPAIR_PENDING,
    stale_before_ms: int,
    next_retry_at_ms: int,
    updated_at_ms: int,
    reason: str = "stale_repair_claim",
    gateways: Iterable[str] | None = None,
) -> int:
    """Return claims older than ``stale_before_ms`` to the queue; returns how many moved.
    ``gateways``: only rows of these gateways (None: every gateway's)."""
    with transaction.atomic():
        stale = MemoryDurableReceipt.objects.select_for_update().filter(
            status=running_status, updated_at__lte=stale_before_ms
        )
        if gateways is not None:
            stale = stale.filter(gateway_id__in=list(gateways))
        rows = list(stale.values_list("receipt_id", "session_key", "gateway_id"))
        if not rows:
            return 0
        changed = MemoryDurableReceipt.objects.filter(
            receipt_id__in=[r[0] for r in rows], status=running_status
        ).update(
            status=pending_status,
            reason=reason,
            next_retry_at_ms=next_retry_at_ms,
            updated_at=updated_at_ms,
        )
        audit.record_events(
            [
                audit.build_event(
                    receipt_id=rid,
                    session_key=key,
                    action="stale_recovery",
                    from_status=running_status,
                    to_status=pending_status,
                    reason=reason,
                    at_ms=updated_at_ms,
                    gateway=gateway,
                )
                for rid, key, gateway in rows
            ]
        )
        return changed


def get_memory_durable_receipt(receipt_id: str) -> MemoryDurableReceipt:
    row = MemoryDurableReceipt.objects.filter(receipt_id=receipt_id).first()
    if row is None:
        raise KeyError(f"Memory durable receipt not found: {receipt_id}")
    return row


def purge_receipts_for_session_key(session_key: str) -> int:
    """Delete every receipt of a key (all generations) in the current gateway; called inside
    the session delete.

    The audit trail keeps one ``purged`` event per receipt and one ``session_deleted`` event
    for the key (also when it had no receipts), with the actor of the surface that deleted it.
    """
    receipts = MemoryDurableReceipt.objects.here().filter(session_key=session_key)
    rows = list(receipts.values_list("receipt_id", "status"))
    if rows:
        receipts.delete()
    audit.record_events(
        [
            *(
                audit.build_event(
                    receipt_id=rid,
                    session_key=session_key,
                    action="purged",
                    from_status=status,
                    reason="session deleted",
                )
                for rid, status in rows
            ),
            audit.build_event(
                receipt_id="",
                session_key=session_key,
                action="session_deleted",
                details={"receipts_purged": len(rows)},
            ),
        ]
    )
    return len(rows)


class _WriteCancelled(Exception):
    """Raised inside the write's transaction to roll it back after the caller gave up."""


async def aupsert_memory_durable_receipt(
    receipt: MemoryDurableReceipt, *, expected_session_id: str | None = None
) -> MemoryDurableReceipt:
    """Async twin of :func:`upsert_memory_durable_receipt` that honours cancellation.

    A thread cannot be interrupted, so when the awaiting task is cancelled (a deadline ran
    out) the write checks a flag just before it commits and rolls back instead: a cancelled
    receipt write is never completed later behind the caller's back.
    """
    cancelled = threading.Event()

    def write() -> MemoryDurableReceipt:
        with transaction.atomic():
            row = upsert_memory_durable_receipt(receipt, expected_session_id=expected_session_id)
            if cancelled.is_set():
                raise _WriteCancelled
        return row

    try:
        return await sync_to_async(write)()
    except asyncio.CancelledError:
        cancelled.set()
        raise


abulk_upsert_memory_durable_receipts = sync_to_async(bulk_upsert_memory_durable_receipts)
aupdate_memory_durable_receipt = sync_to_async(update_memory_durable_receipt)
alist_memory_durable_receipts = sync_to_async(list_memory_durable_receipts)
alist_memory_repair_receipts = sync_to_async(list_memory_repair_receipts)
alist_recent_memory_durable_receipts = sync_to_async(list_recent_memory_durable_receipts)
amemory_durable_receipt_exists_for_path = sync_to_async(memory_durable_receipt_exists_for_path)
aclaim_memory_repair_receipt = sync_to_async(claim_memory_repair_receipt)
arecover_stale_memory_repair_claims = sync_to_async(recover_stale_memory_repair_claims)
aget_memory_durable_receipt = sync_to_async(get_memory_durable_receipt)
