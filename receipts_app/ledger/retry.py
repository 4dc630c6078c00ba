"""Retry a whole transaction when PostgreSQL aborted it to break a lock cycle.

A deadlock (SQLSTATE 40P01) or serialization failure (40001) means the database rolled the
transaction back and nothing was written, so running it again is safe. The transaction runs
again after a short, growing, jittered pause (the other side of the cycle commits meanwhile),
up to ``attempts`` times; the last conflict, or any other error, is raised as it is. Only a
transaction this code starts is retried: inside someone else's ``atomic`` block the outer
transaction is already lost, so the error goes up to whoever owns it.

Writers keep conflicts rare in the first place by locking receipts in one order, the
idempotency key's (``LOCK_ORDER``): the bulk upsert writes its rows sorted by key and a plan
batch locks its rows in the same order.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import OperationalError, connection, transaction
from django.db.models import F, OrderBy
from django.db.models.functions import Collate

logger = logging.getLogger(__name__)

RETRYABLE_SQLSTATES = frozenset({"40P01", "40001"})
ATTEMPTS = 8
FIRST_PAUSE_S = 0.02
MAX_PAUSE_S = 1.0
T = TypeVar("T")


def is_lock_conflict(exc: BaseException) -> bool:
    cause = exc.__cause__
    return getattr(cause, "sqlstate", None) in RETRYABLE_SQLSTATES


def pause_before(attempt: int) -> float:
    """Seconds to wait before attempt ``attempt + 1``: doubling, capped, with full jitter."""
    ceiling = min(MAX_PAUSE_S, FIRST_PAUSE_S * (2 ** (attempt - 1)))
    return random.uniform(ceiling / 2, ceiling)  # noqa: S311 - jitter, not secrecy


def atomic_retrying(work: Callable[[], T], *, attempts: int = ATTEMPTS) -> T:
    """``work()`` in its own transaction, run again after a lock conflict (at most
    ``attempts`` runs in all)."""
    retry = not connection.in_atomic_block
    attempt = 1
    while True:
        try:
            with transaction.atomic():
                return work()
        except OperationalError as exc:
            if not (retry and is_lock_conflict(exc)) or attempt >= attempts:
                raise
            pause = pause_before(attempt)
            logger.warning(
                "transaction retried after %s (attempt %d of %d, in %.0f ms)",
                type(exc.__cause__).__name__,
                attempt + 1,
                attempts,
                pause * 1000,
            )
            time.sleep(pause)
            attempt += 1


def lock_order() -> tuple[OrderBy, OrderBy]:
    """The order every multi-row writer locks receipts in: the gateway, then the idempotency
    key (unique within it), compared as the bulk upsert's Python ``sorted`` compares them (by
    code point: PostgreSQL's "C" collation), whatever the database's own collation."""
    if connection.vendor == "postgresql":
        return Collate(F("gateway_id"), "C").asc(), Collate(F("idempotency_key"), "C").asc()
    return F("gateway_id").asc(), F("idempotency_key").asc()
