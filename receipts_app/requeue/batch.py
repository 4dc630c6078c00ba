"""Requeue a batch of receipts as a set: the plan executor's path.

Same rules, same transitions, same audit events and the same follow-up tasks as calling
``requeue_receipt`` on each row in turn, with a constant number of statements per batch:
one locked SELECT of the rows, the two rule lookups for the whole batch, one conditional
UPDATE per target status, one INSERT of the events, and the follow-up messages published
after commit through one producer.

The compare-and-set is kept row by row: an UPDATE moves a row only if it still has the
``(status, updated_at)`` read under the lock. Under that lock it always does; if a row ever
does not move, it is reported ``stale`` exactly as ``requeue_receipt`` would.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import BooleanField, F, Value
from django.db.models.expressions import RawSQL
from django.db.models.functions import Greatest

from opensquilla_site import timeutil

from .. import audit
from ..audit import Actor
from ..checkpoint import DEFAULT_SOURCE
from ..models import MemoryDurableReceipt
from ..statuses import (
    CHECKPOINT_FAILED,
    CHECKPOINT_REQUEUED,
    CHECKPOINT_SUPERSEDED,
    REPAIR_PENDING,
    REPAIR_QUEUE_STATUSES,
    TERMINAL_REPAIR_STATUSES,
)
from . import dispatch
from .engine import RequeueResult, requeue_event
from .rules import ROW_FACT_FIELDS, BatchContext, Outcome, RowFacts, decide_requeue

_STALE = "stale: changed meanwhile"


@dataclass
class _Move:
    """One row the batch moves: where it goes, and the result if the move lands."""

    row: RowFacts
    result: RequeueResult
    message: dispatch.Message | None = None


def requeue_batch(
    targets: Sequence[tuple[int, str]],
    *,
    actor: Actor,
    reason: str = "",
    plan_id: str | None = None,
) -> list[RequeueResult]:
    """Requeue ``(pk, receipt_id)`` pairs; one result per pair, in the order given.

    Must run inside a transaction (the plan's batch transaction): the row locks, the
    writes and the events commit or roll back together, and the messages leave after commit.
    """
    with audit.acting_as(actor):
        locked = {
            row.pk: row
            for row in map(
                RowFacts._make,
                MemoryDurableReceipt.objects.select_for_update()
                .filter(pk__in=[pk for pk, _rid in targets])
                .order_by("id")
                .values_list(*ROW_FACT_FIELDS),
            )
        }
        now = timeutil.now_ms()
        context = BatchContext(locked.values())
        results: dict[int, RequeueResult] = {}
        groups: dict[str, list[_Move]] = {}
        for pk, receipt_id in targets:
            row = locked.get(pk)
            if row is None:
                results[pk] = RequeueResult(
                    receipt_id, Outcome.NOT_FOUND, "receipt not found", None
                )
                continue
            outcome, text, saved_id = decide_requeue(row, now_ms=now, context=context)
            target = _target_status(row, outcome)
            if target is None:
                results[pk] = RequeueResult(row.receipt_id, outcome, text, row.status)
                continue
            move = _Move(row, RequeueResult(row.receipt_id, outcome, text, target))
            if target == CHECKPOINT_SUPERSEDED:
                move.result.superseded_by = saved_id
                # Each superseded row links to its own saved checkpoint: one key per link.
                groups.setdefault(f"{target}:{saved_id}", []).append(move)
            else:
                move.message = _follow_up(row, target)
                groups.setdefault(target, []).append(move)
        for moves in groups.values():
            _apply(moves, now, results)
        _enqueue_landed(targets, results, groups)
        audit.record_events(
            [
                requeue_event(
                    results[pk],
                    locked[pk].status if pk in locked else None,
                    locked[pk].session_key if pk in locked else "",
                    actor,
                    reason,
                    plan_id,
                )
                for pk, _rid in targets
            ]
        )
        return [results[pk] for pk, _rid in targets]


def _target_status(row: RowFacts, outcome: Outcome) -> str | None:
    if outcome is Outcome.SUPERSEDED:
        return CHECKPOINT_SUPERSEDED
    if outcome is not Outcome.REQUEUED:
        return None
    if row.status == CHECKPOINT_FAILED:
        return CHECKPOINT_REQUEUED
    if row.status in TERMINAL_REPAIR_STATUSES or row.status in REPAIR_QUEUE_STATUSES:
        return REPAIR_PENDING
    raise AssertionError(f"no requeue transition for {row.status}")  # pragma: no cover


def _follow_up(row: RowFacts, target: str) -> dispatch.Message:
    if target == CHECKPOINT_REQUEUED:
        return dispatch.checkpoint_message(
            row.session_key, turn_id=row.turn_id, requeue_of=row.receipt_id, source=DEFAULT_SOURCE
        )
    return dispatch.repair_message(row.receipt_id)


def _fields(move: _Move, now: int) -> dict[str, Any]:
    """The columns a move writes; ``updated_at`` as in ``engine._next_stamp``."""
    stamp = Greatest(Value(now), F("updated_at") + 1)
    target = move.result.status
    if target == CHECKPOINT_SUPERSEDED:
        return {
            "status": target,
            "resolved_by_receipt_id": move.result.superseded_by,
            "updated_at": stamp,
        }
    if target == CHECKPOINT_REQUEUED:
        return {"status": target, "resolved_by_receipt_id": None, "updated_at": stamp}
    return {"status": target, "next_retry_at_ms": now, "attempt_count": 0, "updated_at": stamp}


def _still_as_read(moves: list[_Move]) -> RawSQL:
    """``(id, status, updated_at) IN (VALUES …)``: the per-row compare-and-set as one condition.

    A row-value IN list (PostgreSQL, SQLite >= 3.15) instead of an OR of per-row ``Q``
    objects, which Django takes longer to build than the database takes to run.
    """
    quote = connection.ops.quote_name
    columns = ", ".join(quote(c) for c in ("id", "status", "updated_at"))
    rows = ", ".join(["(%s, %s, %s)"] * len(moves))
    params = [v for m in moves for v in (m.row.pk, m.row.status, m.row.updated_at)]
    # Only fixed, quoted column names and placeholders are formatted in; values are params.
    sql = f"({columns}) IN (VALUES {rows})"
    return RawSQL(sql, params, output_field=BooleanField())  # noqa: S611


def _apply(moves: list[_Move], now: int, results: dict[int, RequeueResult]) -> None:
    """One conditional UPDATE for rows going to the same place; a row that misses is stale."""
    moved = MemoryDurableReceipt.objects.filter(_still_as_read(moves)).update(
        **_fields(moves[0], now)
    )
    landed = {m.row.pk for m in moves}
    if moved != len(moves):
        # Cannot happen under the row locks; kept so a miss is reported, never assumed.
        expected = {m.row.pk: (m.result.status, max(now, m.row.updated_at + 1)) for m in moves}
        landed = {
            pk
            for pk, status, updated_at in MemoryDurableReceipt.objects.filter(
                pk__in=list(expected)
            ).values_list("pk", "status", "updated_at")
            if expected[pk] == (status, updated_at)
        }
    for move in moves:
        if move.row.pk in landed:
            results[move.row.pk] = move.result
        else:
            results[move.row.pk] = RequeueResult(
                move.row.receipt_id, Outcome.STALE, _STALE, move.row.status
            )


def _enqueue_landed(
    targets: Sequence[tuple[int, str]],
    results: dict[int, RequeueResult],
    groups: dict[str, list[_Move]],
) -> None:
    """Queue the follow-up of every row that moved, in the batch's order, after commit."""
    messages = {m.row.pk: m.message for moves in groups.values() for m in moves if m.message}
    ordered = [
        pk for pk, _rid in targets if pk in messages and results[pk].outcome is not Outcome.STALE
    ]
    task_ids = dispatch.enqueue_many_on_commit([messages[pk] for pk in ordered])  # type: ignore[misc]
    for pk, task_id in zip(ordered, task_ids, strict=True):
        results[pk].task_id = task_id
