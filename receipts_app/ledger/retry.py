"""Retry a whole transaction once when PostgreSQL aborted it to break a lock cycle.

A deadlock (SQLSTATE 40P01) or serialization failure (40001) means the database rolled the
transaction back and nothing was written, so running it again is safe; a second failure is
raised as it is. Only a transaction this code starts is retried: inside someone else's
``atomic`` block the outer transaction is already lost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from django.db import OperationalError, connection, transaction

logger = logging.getLogger(__name__)

RETRYABLE_SQLSTATES = frozenset({"40P01", "40001"})
T = TypeVar("T")


def is_lock_conflict(exc: BaseException) -> bool:
    cause = exc.__cause__
    return getattr(cause, "sqlstate", None) in RETRYABLE_SQLSTATES


def atomic_retrying_once(work: Callable[[], T]) -> T:
    """``work()`` in its own transaction; once more if the first attempt deadlocked."""
    retry = not connection.in_atomic_block
    try:
        with transaction.atomic():
            return work()
    except OperationalError as exc:
        if not (retry and is_lock_conflict(exc)):
            raise
        logger.warning("ledger transaction retried after %s", type(exc.__cause__).__name__)
    with transaction.atomic():
        return work()
