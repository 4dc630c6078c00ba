"""Overlapping concurrent ``POST /receipts/bulk`` batches on PostgreSQL never deadlock into a
500: each batch locks its keys in one order (sorted), and a deadlock or serialization failure
that still happens is retried once before answering.

Real gunicorn (4 workers) and 8 client threads, each posting batches drawn from one shared pool
of keys in its own shuffled order, with repeats inside a batch.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from opensquilla_site.tokens import create_api_token
from receipts_app.models import MemoryDurableReceipt
from tests.factories import make_user
from tests.reliability.test_gunicorn import start_gunicorn  # noqa: F401 - fixture

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

CLIENTS = 8
BATCHES_PER_CLIENT = 12
POOL = 120
BATCH = 80


def _row(key: int, writer: str) -> dict:
    return {
        "session_key": f"agent:main:webchat:bulk{key % 7}",
        "session_id": "bulk",
        "scope": "checkpoint",
        "idempotency_key": f"bulk:{key}",
        "status": "checkpoint_saved",
        "turn_id": writer,
    }


def test_overlapping_bulk_batches_never_answer_500(require_postgres, start_gunicorn):  # noqa: F811
    user = make_user("ops", "operator")
    _token, plaintext = create_api_token(user=user, name="bulk", scope="operate")
    server = start_gunicorn(WEB_WORKERS="4")
    statuses: Counter[int] = Counter()
    lock = threading.Lock()
    barrier = threading.Barrier(CLIENTS)

    def client(index: int) -> None:
        rng = random.Random(index)
        headers = {"Authorization": f"Bearer {plaintext}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=120) as http:
            barrier.wait()
            for n in range(BATCHES_PER_CLIENT):
                keys = rng.sample(range(POOL), BATCH)
                keys += rng.sample(keys, 5)  # a key twice in one batch: the last one wins
                body = {"receipts": [_row(k, f"c{index}-{n}-{i}") for i, k in enumerate(keys)]}
                response = http.post("/api/v1/receipts/bulk", json=body)
                with lock:
                    statuses[response.status_code] += 1
                if response.status_code == 200:
                    results = response.json()["results"]
                    assert len(results) == len(keys)
                    last = {k: f"c{index}-{n}-{i}" for i, k in enumerate(keys)}
                    # Every row of the answer shows the batch's last value for its key, or a
                    # later writer's; repeated keys answer with the same stored row.
                    by_key = {}
                    for item in results:
                        receipt = item["receipt"]
                        by_key.setdefault(receipt["idempotency_key"], receipt["receipt_id"])
                        assert by_key[receipt["idempotency_key"]] == receipt["receipt_id"]
                    assert set(by_key) == {f"bulk:{k}" for k in last}

    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(client, range(CLIENTS)))

    assert statuses == Counter({200: CLIENTS * BATCHES_PER_CLIENT}), statuses
    assert MemoryDurableReceipt.objects.count() == POOL
