"""Requeue plans executing while bulk upserts rewrite the same rows, on PostgreSQL.

Both lock many receipts in one transaction. They lock them in one order (the idempotency key's),
and a deadlock or serialization failure that happens anyway is retried, so no plan that was
started ends ``failed`` and no bulk write raises. Real threads and real commits; the keys sort
in another order than the rows were inserted, which is what made the two paths' locks cross.
"""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from receipts_app import enqueue, ledger
from receipts_app.audit import Actor
from receipts_app.models import MemoryDurableReceipt, RequeuePlan
from receipts_app.requeue import create_requeue_plan, run_requeue_plan, start_requeue_plan
from tests.factories import make_session

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

KEYS = 500
WRITERS = 6
BATCHES = 8
BATCH = 200
PLANS = 6
ACTOR = Actor("ops", "api")


def _row(session, key: str, writer: str) -> MemoryDurableReceipt:
    return MemoryDurableReceipt(
        session_key=session.session_key,
        session_id=session.session_id,
        scope="repair",
        idempotency_key=key,
        status="repair_failed",
        reason=f"written by {writer}",
        attempt_count=3,
    )


def test_plans_beside_bulk_writes_never_fail_on_a_lock_conflict(require_postgres, monkeypatch):
    monkeypatch.setattr(enqueue, "_send", lambda *args, **kwargs: None)
    session = make_session("agent:main:webchat:locks")
    rng = random.Random(7)
    # Random keys inserted in their own order: the key order (the bulk upsert's) and the id
    # order are unrelated, as in a ledger written over time.
    keys = [f"repair:{rng.getrandbits(64):016x}" for _ in range(KEYS)]
    seed = [_row(session, k, "seed") for k in keys]
    for n, row in enumerate(seed):
        row.receipt_id, row.agent_id, row.created_at, row.updated_at = f"r{n}", "main", n, n
    MemoryDurableReceipt.objects.bulk_create(seed)
    barrier = threading.Barrier(WRITERS + PLANS)
    errors: list[BaseException] = []

    def writer(index: int) -> None:
        local = random.Random(index)
        try:
            barrier.wait()
            for n in range(BATCHES):
                batch = local.sample(keys, BATCH)
                ledger.bulk_upsert_memory_durable_receipts(
                    [_row(session, k, f"w{index}-{n}") for k in batch]
                )
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)
        finally:
            connection.close()

    def planner(index: int) -> str:
        try:
            plan = create_requeue_plan(
                filters={"status": ["repair_failed"], "scope": ["repair"]},
                receipt_ids=None,
                actor=ACTOR,
            )
            start_requeue_plan(plan_id=plan.plan_id, actor=ACTOR)
            barrier.wait()
            while True:
                plan = run_requeue_plan(plan.plan_id, batch_size=200, time_budget_s=5)
                if plan.state not in ("queued", "running"):
                    return plan.plan_id
        finally:
            connection.close()

    with ThreadPoolExecutor(WRITERS + PLANS) as pool:
        writes = [pool.submit(writer, i) for i in range(WRITERS)]
        plans = [pool.submit(planner, i) for i in range(PLANS)]
        plan_ids = [f.result() for f in plans]
        for f in writes:
            f.result()

    assert errors == []
    states = dict(RequeuePlan.objects.filter(plan_id__in=plan_ids).values_list("plan_id", "state"))
    failures = list(RequeuePlan.objects.filter(state="failed").values_list("error", flat=True))
    assert failures == [] and set(states.values()) == {"done"}, failures
    assert MemoryDurableReceipt.objects.count() == KEYS
