"""Concurrency on PostgreSQL: the upsert and the claim are safe under real parallel writers."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from receipts_app import ledger
from receipts_app.models import MemoryDurableReceipt

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

WRITERS = 8
KEYS = 1_000


def _in_thread(fn):
    def run(*args):
        try:
            return fn(*args)
        finally:
            connection.close()

    return run


def test_eight_writers_on_the_same_keys_leave_one_row_each_with_its_first_id(require_postgres):
    barrier = threading.Barrier(WRITERS)

    @_in_thread
    def writer(worker: int) -> dict[str, str]:
        barrier.wait()
        seen = {}
        for index in range(KEYS):
            stored = ledger.upsert_memory_durable_receipt(
                MemoryDurableReceipt(
                    receipt_id=f"w{worker}-{index}",
                    session_key="agent:main:webchat:race",
                    session_id="session-1",
                    scope="checkpoint",
                    idempotency_key=f"race:{index}",
                    status="checkpoint_saved",
                    attempt_count=worker,
                )
            )
            seen[stored.idempotency_key] = stored.receipt_id
        return seen

    with ThreadPoolExecutor(WRITERS) as pool:
        results = list(pool.map(writer, range(WRITERS)))

    rows = dict(MemoryDurableReceipt.objects.values_list("idempotency_key", "receipt_id"))
    assert len(rows) == KEYS
    assert MemoryDurableReceipt.objects.count() == KEYS
    for key, receipt_id in rows.items():
        # Whoever inserted first owns the id; every later writer got that same row back.
        assert receipt_id.endswith(f"-{key.split(':')[1]}")
    for seen in results:
        for key, receipt_id in seen.items():
            assert rows[key] == receipt_id


def test_two_concurrent_claimers_claim_each_row_once(require_postgres):
    for index in range(200):
        ledger.upsert_memory_durable_receipt(
            MemoryDurableReceipt(
                receipt_id=f"q{index}",
                session_key="agent:main:webchat:q",
                session_id="s",
                scope="repair",
                idempotency_key=f"q:{index}",
                status="repair_pending",
            )
        )
    barrier = threading.Barrier(2)

    @_in_thread
    def claimer(_: int) -> list[str]:
        barrier.wait()
        won = []
        for index in range(200):
            if ledger.claim_memory_repair_receipt(f"q{index}", now_ms=10**13):
                won.append(f"q{index}")
        return won

    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(claimer, range(2))
    assert not set(first) & set(second)
    assert len(first) + len(second) == 200
    assert MemoryDurableReceipt.objects.filter(status="repair_running").count() == 200
