"""One checkpoint attempt as the product runs it (worker task or in-process trigger).

A failed write is already a ``checkpoint_failed`` receipt (``record_memory_checkpoint``
records it before re-raising), so callers report that receipt instead of raising: a task
must not crash-loop on a failure the ledger holds. The checkpoint trigger and the requeued
checkpoint share these helpers, so both answer in the same shape.

A saved checkpoint resolves the older failures it covers (:func:`supersede_covered_failures`):
after "Checkpoint now" says "Covered.", the session's earlier ``checkpoint_failed`` rows are
``checkpoint_superseded`` and no longer at risk. ``record_memory_checkpoint`` itself stays
upstream's (it never touches other rows); only the product's checkpoints here do this.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import Q

from opensquilla_site.timeutil import now_ms
from sessions_app.keys import canonicalize_session_key

from .. import audit
from ..models import MemoryDurableReceipt
from ..statuses import CHECKPOINT_FAILED, CHECKPOINT_SAVED, CHECKPOINT_SUPERSEDED
from .events import DEFAULT_SOURCE
from .record import record_memory_checkpoint

logger = logging.getLogger(__name__)


def checkpoint_with_deadline(
    session_key: str, *, turn_id: str | None = None, source: str = DEFAULT_SOURCE
) -> MemoryDurableReceipt:
    """``record_memory_checkpoint`` under the configured deadline; raises as it does. A saved
    checkpoint then supersedes the failures it covers."""
    saved = record_memory_checkpoint(
        session_key,
        turn_id=turn_id,
        source=source,
        timeout=getattr(settings, "OPENSQUILLA_CHECKPOINT_TIMEOUT", None),
    )
    try:
        supersede_covered_failures(saved)
    except DatabaseError:
        # The checkpoint is saved; the failures stay at risk and the next save retries them.
        logger.exception("superseding the failures covered by %s failed", saved.receipt_id)
    return saved


def supersede_covered_failures(saved: MemoryDurableReceipt) -> list[str]:
    """Mark the ``checkpoint_failed`` rows a saved checkpoint covers ``checkpoint_superseded``
    (``resolved_by_receipt_id`` = the saved one), one ``supersede`` audit event each, by the
    current actor; returns their receipt ids.

    Covered is the requeue rules' "superseded" (docs/STATUSES.md): the same gateway, session key and
    generation (``session_id``), created no later than the save, and ``coverage_entry_count``
    at most the save's (a failed row without one counts as 0). A generation's transcript only
    grows, so the save holds everything those attempts tried to save.
    """
    if saved.status != CHECKPOINT_SAVED or saved.scope != "checkpoint":
        return []
    covered = saved.coverage_entry_count or 0
    with transaction.atomic():
        rows = list(
            MemoryDurableReceipt.objects.select_for_update()
            .filter(
                gateway_id=saved.gateway_id,
                session_key=saved.session_key,
                session_id=saved.session_id,
                scope="checkpoint",
                status=CHECKPOINT_FAILED,
                created_at__lte=saved.created_at,
            )
            .filter(Q(coverage_entry_count__lte=covered) | Q(coverage_entry_count__isnull=True))
            .exclude(pk=saved.pk)
            .values_list("pk", "receipt_id", "updated_at")
        )
        if not rows:
            return []
        # Past every row's stamp: a compare-and-set that read a row before sees it moved.
        stamp = max(now_ms(), *(at + 1 for _pk, _rid, at in rows))
        MemoryDurableReceipt.objects.filter(
            pk__in=[pk for pk, _rid, _at in rows], status=CHECKPOINT_FAILED
        ).update(
            status=CHECKPOINT_SUPERSEDED,
            resolved_by_receipt_id=saved.receipt_id,
            updated_at=stamp,
        )
        audit.record_events(
            [
                audit.build_event(
                    receipt_id=rid,
                    session_key=saved.session_key,
                    action="supersede",
                    from_status=CHECKPOINT_FAILED,
                    to_status=CHECKPOINT_SUPERSEDED,
                    outcome="superseded",
                    details={"superseded_by": saved.receipt_id},
                    at_ms=stamp,
                    gateway=saved.gateway_id,
                )
                for _pk, rid, _at in rows
            ]
        )
    return [rid for _pk, rid, _at in rows]


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
