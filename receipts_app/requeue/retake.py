"""Retake a requeued checkpoint (the ``checkpoint_session`` task with ``requeue_of``).

The generation is checked twice: here, before the checkpoint is taken, and by
``complete_checkpoint_requeue`` against the saved receipt, so a reset that lands mid-task
cannot "recover" the old row with a checkpoint of the new generation. A redelivered task
finds the row already closed and does nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from opensquilla_site.exceptions import GenerationChanged
from sessions_app.gateways import MisroutedWork, check_served, using_gateway

from .. import audit, ledger
from ..checkpoint import DEFAULT_SOURCE
from ..checkpoint.attempt import attempt_checkpoint, failed_result, saved_result
from ..models import MemoryDurableReceipt
from ..statuses import CHECKPOINT_REQUEUED
from .engine import complete_checkpoint_requeue

logger = logging.getLogger(__name__)


def retake_checkpoint(
    requeued_receipt_id: str, *, turn_id: str | None = None, source: str = DEFAULT_SOURCE
) -> dict[str, Any]:
    """Checkpoint the live transcript for a ``checkpoint_requeued`` row and close the row:
    ``checkpoint_recovered`` (linked to the new save) or back to ``checkpoint_failed``."""
    row = MemoryDurableReceipt.objects.filter(receipt_id=requeued_receipt_id).first()
    if row is None:
        return {"receipt_id": None, "status": "not_found", "requeue_of": requeued_receipt_id}
    try:
        # Only a worker given the row's gateway's workspaces may write its checkpoint.
        check_served(row.gateway_id, what=f"requeued checkpoint {row.receipt_id}")
    except MisroutedWork as exc:
        logger.error("%s", exc)
        if row.status == CHECKPOINT_REQUEUED:
            complete_checkpoint_requeue(requeued_receipt_id=row.receipt_id, saved=None, error=exc)
        return {
            "receipt_id": row.receipt_id,
            "status": "refused",
            "error": str(exc),
            "requeue_of": requeued_receipt_id,
        }
    # The retake acts in the row's own gateway: its session, its fence, its new receipt.
    with using_gateway(row.gateway_id):
        return _retake(row, turn_id=turn_id, source=source)


def _retake(row: MemoryDurableReceipt, *, turn_id: str | None, source: str) -> dict[str, Any]:
    requeued_receipt_id = row.receipt_id
    if row.status != CHECKPOINT_REQUEUED:
        return {
            "receipt_id": row.resolved_by_receipt_id or row.receipt_id,
            "status": row.status,
            "requeue_of": requeued_receipt_id,
            "skipped": True,
        }
    if ledger.generation_changed(row.session_key, row.session_id):
        fence = GenerationChanged(row.session_key)
        complete_checkpoint_requeue(requeued_receipt_id=row.receipt_id, saved=None, error=fence)
        return failed_result(row.session_key, fence, requeued_receipt_id)
    with audit.acting_as(audit.WORKER):
        saved, error = attempt_checkpoint(row.session_key, turn_id=turn_id, source=source)
    complete_checkpoint_requeue(requeued_receipt_id=row.receipt_id, saved=saved, error=error)
    if saved is None:
        assert error is not None
        return failed_result(row.session_key, error, requeued_receipt_id)
    return saved_result(saved, requeued_receipt_id)
