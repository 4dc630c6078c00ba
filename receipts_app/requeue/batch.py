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

from django.db import connection
from django.db.models import BooleanField, F, Value
from django.db.models.expressions import RawSQL
from django.db.models.functions import Greatest

from opensquilla_site import timeutil

from .. import audit, enqueue
from ..audit import Actor
from ..ledger.retry import lock_order
from ..models import MemoryDurableReceipt
from .engine import STALE_MESSAGE, RequeueResult, requeue_event
from .rules import ROW_FACT_FIELDS, BatchContext, Outcome, RowFacts, decide_requeue
from .transitions import Transition, requeue_transition


@dataclass
class _Move:
    """One row the batch moves: its transition, and the result if the move lands."""

    row: RowFacts
    transition: Transition
    result: RequeueResult


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
        # Locked in the ledger's one lock order (the bulk upsert's): no lock cycle with it.
        locked = {
            row.pk: row
            for row in map(
                RowFacts._make,
                MemoryDurableReceipt.objects.select_for_update()
                .filter(pk__in=[pk for pk, _rid in targets])
                .order_by(*lock_order())
                .values_list(*ROW_FACT_FIELDS),
            )
        }
        now = timeutil.now_ms()
        context = BatchContext(locked.values())
        results: dict[int, RequeueResult] = {}
        # Rows with equal transitions (status and columns) share one UPDATE; each superseded
        # row links to its own saved checkpoint, so those group by link.
        groups: dict[tuple[str, tuple[tuple[str, object], ...]], list[_Move]] = {}
        for pk, receipt_id in targets:
            row = locked.get(pk)
            if row is None:
                results[pk] = RequeueResult(
                    receipt_id, Outcome.NOT_FOUND, "receipt not found", None
                )
                continue
            outcome, text, saved_id = decide_requeue(row, now_ms=now, context=context)
            move = requeue_transition(row, outcome, now_ms=now, superseded_by=saved_id)
            if move is None:
                results[pk] = RequeueResult(row.receipt_id, outcome, text, row.status)
                continue
            result = RequeueResult(row.receipt_id, outcome, text, move.status)
            if outcome is Outcome.SUPERSEDED:
                result.superseded_by = saved_id
            groups.setdefault((move.status, move.columns), []).append(_Move(row, move, result))
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
                    locked[pk].gateway_id if pk in locked else None,
                )
                for pk, _rid in targets
            ]
        )
        return [results[pk] for pk, _rid in targets]


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
    # The stamp is ``engine._next_stamp`` in SQL: every row gets its own ``updated_at + 1``.
    stamp = Greatest(Value(now), F("updated_at") + 1)
    moved = MemoryDurableReceipt.objects.filter(_still_as_read(moves)).update(
        **moves[0].transition.update(stamp)
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
                move.row.receipt_id, Outcome.STALE, STALE_MESSAGE, move.row.status
            )


def _enqueue_landed(
    targets: Sequence[tuple[int, str]],
    results: dict[int, RequeueResult],
    groups: dict[tuple[str, tuple[tuple[str, object], ...]], list[_Move]],
) -> None:
    """Queue the follow-up of every row that moved, in the batch's order, after commit."""
    messages = {
        m.row.pk: m.transition.follow_up
        for moves in groups.values()
        for m in moves
        if m.transition.follow_up is not None
    }
    ordered = [
        pk for pk, _rid in targets if pk in messages and results[pk].outcome is not Outcome.STALE
    ]
    task_ids = enqueue.send_many([messages[pk] for pk in ordered])
    for pk, task_id in zip(ordered, task_ids, strict=True):
        results[pk].task_id = task_id
