"""Concurrency on PostgreSQL with real threads and real commits.

- 16 writers upsert overlapping idempotency keys for a bounded time (about 5 s here; 30 s
  under ``-m soak``): every key written has exactly one row, no row is lost, and each row holds
  a value that some writer wrote for that key.
- Two threads run the same requeue plan at once: each receipt is requeued exactly once.
"""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from django.db.models import Count

from receipts_app import enqueue, ledger
from receipts_app.audit import Actor
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent
from receipts_app.requeue import create_requeue_plan, get_requeue_plan, run_requeue_plan
from tests.factories import make_receipt

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgres,
]

WRITERS = 16
KEYS = 400  # shared by all writers, so most writes conflict with another writer's


def hammer(seconds: float) -> dict:
    """Run the writers for ``seconds``; returns what they wrote, per key."""
    written: dict[str, set[str]] = defaultdict(set)
    lock = threading.Lock()
    barrier = threading.Barrier(WRITERS)
    errors: list[BaseException] = []
    deadline_holder: list[float] = []

    def writer(index: int) -> int:
        rng = random.Random(index)
        done = 0
        try:
            barrier.wait()
            if not deadline_holder:
                deadline_holder.append(time.monotonic() + seconds)
            while time.monotonic() < deadline_holder[0]:
                key = f"soak:{rng.randrange(KEYS)}"
                value = f"w{index}-{done}"
                ledger.upsert_memory_durable_receipt(
                    MemoryDurableReceipt(
                        session_key=f"agent:main:webchat:load{rng.randrange(8)}",
                        session_id="load",
                        turn_id=value,
                        scope="checkpoint",
                        idempotency_key=key,
                        status="checkpoint_saved",
                        reason=value,
                    )
                )
                with lock:
                    written[key].add(value)
                done += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()
        return done

    with ThreadPoolExecutor(WRITERS) as pool:
        counts = list(pool.map(writer, range(WRITERS)))
    assert errors == [], errors[:3]
    return {"written": written, "upserts": sum(counts), "per_writer": counts}


def assert_nothing_lost_or_duplicated(written: dict[str, set[str]]) -> None:
    rows = list(MemoryDurableReceipt.objects.values("idempotency_key", "reason", "turn_id"))
    by_key = defaultdict(list)
    for row in rows:
        by_key[row["idempotency_key"]].append(row)
    assert set(by_key) == set(written), "a key written is missing, or a stray key appeared"
    duplicated = [k for k, v in by_key.items() if len(v) != 1]
    assert duplicated == []
    for key, (row,) in by_key.items():
        # The row is one complete write (reason and turn_id from the same upsert).
        assert row["reason"] in written[key] and row["turn_id"] == row["reason"], key


def test_sixteen_writers_on_overlapping_keys_lose_and_duplicate_nothing(require_postgres):
    result = hammer(seconds=5.0)
    print(
        f"load: {WRITERS} writers, {result['upserts']} upserts in 5 s over "
        f"{len(result['written'])} keys"
    )
    assert result["upserts"] > WRITERS * 10
    assert all(n > 0 for n in result["per_writer"])  # every writer got through
    assert_nothing_lost_or_duplicated(result["written"])


@pytest.mark.soak
def test_soak_sixteen_writers_for_thirty_seconds(require_postgres):
    result = hammer(seconds=30.0)
    print(f"soak: {WRITERS} writers, {result['upserts']} upserts in 30 s")
    assert_nothing_lost_or_duplicated(result["written"])


@pytest.fixture
def sent(monkeypatch):
    messages: list[tuple[str, tuple]] = []
    lock = threading.Lock()

    def record(task_name, task_id, args, kwargs):
        with lock:
            messages.append((task_name, tuple(args)))

    monkeypatch.setattr(enqueue, "_send", record)
    return messages


def test_two_runners_of_one_plan_requeue_each_receipt_once(require_postgres, sent):
    rows = [
        make_receipt(scope="repair", status="repair_abandoned", attempt_count=4) for _ in range(60)
    ]
    plan = create_requeue_plan(
        filters={"status": ["repair_abandoned"]}, receipt_ids=None, actor=Actor("ops", "api")
    )
    plan.state = "queued"
    plan.save(update_fields=["state"])
    barrier = threading.Barrier(2)

    def runner(_index: int):
        try:
            barrier.wait()
            return run_requeue_plan(plan.plan_id, batch_size=7)
        finally:
            connection.close()

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(runner, range(2)))

    final = get_requeue_plan(plan.plan_id)
    assert final.state == "done"
    assert final.processed == len(rows)
    assert final.result_counts == {"requeued": len(rows)}
    per_receipt = dict(
        ReceiptEvent.objects.filter(action="requeue", plan_id=plan.plan_id)
        .values_list("receipt_id")
        .annotate(n=Count("id"))
        .values_list("receipt_id", "n")
    )
    assert per_receipt == {r.receipt_id: 1 for r in rows}
    assert set(
        ReceiptEvent.objects.filter(action="requeue", plan_id=plan.plan_id).values_list(
            "outcome", flat=True
        )
    ) == {"requeued"}
    assert sorted(sent) == sorted(("repair_receipt", (r.receipt_id,)) for r in rows)
    assert set(MemoryDurableReceipt.objects.values_list("status", flat=True)) == {"repair_pending"}
