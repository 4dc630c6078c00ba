"""One checkpoint attempt as the product runs it (worker task or in-process trigger).

A failed write is already a ``checkpoint_failed`` receipt (``record_memory_checkpoint``
records it before re-raising), so callers report that receipt instead of raising: a task
must not crash-loop on a failure the ledger holds. The checkpoint trigger and the requeued
checkpoint share these helpers, so both answer in the same shape.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

from sessions_app.keys import canonicalize_session_key

from ..models import MemoryDurableReceipt
from ..statuses import CHECKPOINT_FAILED
from .events import DEFAULT_SOURCE
from .record import record_memory_checkpoint

logger = logging.getLogger(__name__)


def checkpoint_with_deadline(
    session_key: str, *, turn_id: str | None = None, source: str = DEFAULT_SOURCE
) -> MemoryDurableReceipt:
    """``record_memory_checkpoint`` under the configured deadline; raises as it does."""
    return record_memory_checkpoint(
        session_key,
        turn_id=turn_id,
        source=source,
        timeout=getattr(settings, "OPENSQUILLA_CHECKPOINT_TIMEOUT", None),
    )


def recorded_failure(session_key: str, error: BaseException) -> MemoryDurableReceipt | None:
    """The ``checkpoint_failed`` receipt the checkpoint wrote for ``error`` (its reason is the
    error's text), or None when the failure left no receipt (the deadline ran out)."""
    return (
        MemoryDurableReceipt.objects.filter(
            session_key=canonicalize_session_key(session_key),
            scope="checkpoint",
            status=CHECKPOINT_FAILED,
            reason=str(error),
        )
        .order_by("-updated_at", "-id")
        .first()
    )


def attempt_checkpoint(
    session_key: str, *, turn_id: str | None = None, source: str = DEFAULT_SOURCE
) -> tuple[MemoryDurableReceipt | None, BaseException | None]:
    """Take a checkpoint; ``(saved receipt, None)`` or ``(None, the error)``. Never raises."""
    try:
        return checkpoint_with_deadline(session_key, turn_id=turn_id, source=source), None
    except Exception as exc:  # noqa: BLE001 - the failure is a receipt; report it
        logger.warning("checkpoint of %s failed: %s", session_key, exc)
        return None, exc


def saved_result(saved: MemoryDurableReceipt, requeue_of: str | None = None) -> dict[str, Any]:
    """A checkpoint task's answer when the checkpoint was saved."""
    return {"receipt_id": saved.receipt_id, "status": saved.status, "requeue_of": requeue_of}


def failed_result(
    session_key: str, error: BaseException, requeue_of: str | None = None
) -> dict[str, Any]:
    """A checkpoint task's answer when it failed: the failure receipt, if one was written."""
    failed = recorded_failure(session_key, error)
    return {
        "receipt_id": failed.receipt_id if failed is not None else None,
        "status": CHECKPOINT_FAILED,
        "error": f"{type(error).__name__}: {error}",
        "requeue_of": requeue_of,
    }
