"""Trigger services: "checkpoint now" and "flush now" (queued or in-process), and the
checkpoint task's body.

Surfaces (console, API, CLI) call ``enqueue_checkpoint`` / ``enqueue_flush``; the input is
checked here, before anything is queued, so a bad request gets a clear error instead of a
task that fails later. Each trigger leaves an audit event keyed by the session.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import transaction

from opensquilla_site.exceptions import ApplicationError, GenerationChanged
from opensquilla_site.timeutil import now_ms
from sessions_app import services as session_services
from sessions_app.keys import canonicalize_session_key
from sessions_app.models import Session, TranscriptEntry

from . import audit, checkpoint, ledger
from .audit import Actor
from .models import MemoryDurableReceipt
from .requeue import complete_checkpoint_requeue, dispatch
from .statuses import CHECKPOINT_FAILED, CHECKPOINT_REQUEUED

logger = logging.getLogger(__name__)


def _live_session(session_key: str) -> Session:
    session = session_services.get_session(session_key)
    if session is None:
        raise KeyError(f"Session not found: {canonicalize_session_key(session_key)}")
    return session


def _has_transcript(session: Session) -> bool:
    return TranscriptEntry.objects.filter(session_id=session.session_id).exists()


def enqueue_checkpoint(*, session_key: str, actor: Actor, turn_id: str | None = None) -> str:
    """Queue a checkpoint of the live transcript; returns the Celery task id.

    Raises ``KeyError`` for an unknown session and ``ValueError`` for an empty transcript
    (upstream writes no receipt for that case, so queueing it would leave no trace).
    """
    session = _live_session(session_key)
    if not _has_transcript(session):
        raise ValueError("checkpoint transcript cannot be empty")
    with transaction.atomic():
        task_id = dispatch.enqueue_checkpoint(
            session.session_key, turn_id=turn_id, source=checkpoint.DEFAULT_SOURCE
        )
        _record_trigger("checkpoint_now", session, actor, task_id, turn_id=turn_id)
    return task_id


def enqueue_flush(*, session_key: str, actor: Actor) -> str:
    """Queue a flush of the live transcript; returns the Celery task id.

    Raises ``KeyError`` for an unknown session and ``ValueError`` for an empty transcript.
    """
    session = _live_session(session_key)
    if not _has_transcript(session):
        raise ValueError("flush transcript cannot be empty")
    with transaction.atomic():
        task_id = dispatch.enqueue_flush(session.session_key)
        _record_trigger("flush_now", session, actor, task_id)
    return task_id


def _record_trigger(
    action: str,
    session: Session,
    actor: Actor,
    task_id: str | None,
    *,
    turn_id: str | None = None,
    outcome: str = "queued",
) -> None:
    details: dict[str, Any] = {"session_id": session.session_id}
    if task_id:
        details["task_id"] = task_id
    if turn_id:
        details["turn_id"] = turn_id
    audit.record_event(
        receipt_id="",
        session_key=session.session_key,
        action=action,
        outcome=outcome,
        details=details,
        actor=actor,
    )


def perform_checkpoint(
    *,
    session_key: str,
    turn_id: str | None = None,
    requeue_of: str | None = None,
    source: str = checkpoint.DEFAULT_SOURCE,
) -> dict[str, Any]:
    """Take a checkpoint (the ``checkpoint_session`` task's body); never raises for a failure.

    A failed write is already a ``checkpoint_failed`` receipt (the checkpoint service records
    it), so the failure is returned, not raised: a task must not crash-loop on it. With
    ``requeue_of`` the requeued row is closed as recovered or failed. A redelivered task finds
    that row already closed and does nothing.
    """
    if requeue_of:
        row = MemoryDurableReceipt.objects.filter(receipt_id=requeue_of).first()
        if row is None:
            return {"receipt_id": None, "status": "not_found", "requeue_of": requeue_of}
        if row.status != CHECKPOINT_REQUEUED:
            return {
                "receipt_id": row.resolved_by_receipt_id or row.receipt_id,
                "status": row.status,
                "requeue_of": requeue_of,
                "skipped": True,
            }
        session_key = row.session_key
        if ledger.generation_changed(session_key, row.session_id):
            fence = GenerationChanged(session_key)
            complete_checkpoint_requeue(requeued_receipt_id=requeue_of, saved=None, error=fence)
            return _failure(session_key, fence, requeue_of)
    try:
        with audit.acting_as(audit.WORKER):
            saved = checkpoint.record_memory_checkpoint(
                session_key,
                turn_id=turn_id,
                source=source,
                timeout=getattr(settings, "OPENSQUILLA_CHECKPOINT_TIMEOUT", None),
            )
    except Exception as exc:  # noqa: BLE001 - recorded as a receipt; the task must not crash
        logger.warning("checkpoint of %s failed: %s", session_key, exc)
        if requeue_of:
            complete_checkpoint_requeue(requeued_receipt_id=requeue_of, saved=None, error=exc)
        return _failure(session_key, exc, requeue_of)
    if requeue_of:
        complete_checkpoint_requeue(requeued_receipt_id=requeue_of, saved=saved, error=None)
    return {"receipt_id": saved.receipt_id, "status": saved.status, "requeue_of": requeue_of}


def _failure(session_key: str, error: BaseException, requeue_of: str | None) -> dict[str, Any]:
    # The failure receipt (if the checkpoint service could write one) carries the same text.
    failed = (
        MemoryDurableReceipt.objects.filter(
            session_key=canonicalize_session_key(session_key),
            scope="checkpoint",
            status=CHECKPOINT_FAILED,
            reason=str(error),
        )
        .order_by("-updated_at", "-id")
        .values_list("receipt_id", flat=True)
        .first()
    )
    return {
        "receipt_id": failed,
        "status": CHECKPOINT_FAILED,
        "error": f"{type(error).__name__}: {error}",
        "requeue_of": requeue_of,
    }


class CheckpointNotRecorded(ApplicationError):
    """The checkpoint failed before even a failure receipt could be written (a timeout)."""

    code = "checkpoint_not_recorded"
    status = 503


def checkpoint_now(
    *, session_key: str, actor: Actor, turn_id: str | None = None
) -> MemoryDurableReceipt:
    """Run a checkpoint in the caller's process and return the receipt it left.

    That is the saved receipt, or — when the write failed — the ``checkpoint_failed`` receipt
    the checkpoint service recorded for that error. ``KeyError`` (missing session or a
    generation fence) and ``ValueError`` (empty transcript) propagate; a failure that left no
    receipt (the deadline ran out) raises ``CheckpointNotRecorded``.
    """
    session = _live_session(session_key)
    _record_trigger("checkpoint_now", session, actor, None, turn_id=turn_id, outcome="in_process")
    with audit.acting_as(actor):
        try:
            return checkpoint.record_memory_checkpoint(
                session_key,
                turn_id=turn_id,
                timeout=getattr(settings, "OPENSQUILLA_CHECKPOINT_TIMEOUT", None),
            )
        except (KeyError, ValueError):
            raise
        except Exception as exc:  # noqa: BLE001 - the failure is a receipt; return it
            failed = (
                MemoryDurableReceipt.objects.filter(
                    session_key=canonicalize_session_key(session_key),
                    scope="checkpoint",
                    status=CHECKPOINT_FAILED,
                    reason=str(exc),
                )
                .order_by("-updated_at", "-id")
                .first()
            )
            if failed is None:
                raise CheckpointNotRecorded(
                    f"checkpoint failed and was not recorded: {exc}"
                ) from exc
            return failed


def flush_now(*, session_key: str, actor: Actor) -> tuple[Any, list[MemoryDurableReceipt]]:
    """Run a flush in the caller's process; returns its FlushReceipt and the ledger rows of
    the session written since it started (oldest first, at most 100). ``KeyError`` for an
    unknown session."""
    from . import flush_runtime

    session = _live_session(session_key)
    _record_trigger("flush_now", session, actor, None, outcome="in_process")
    started = now_ms()
    with audit.acting_as(actor):
        outcome = flush_runtime.flush_session(session.session_key)
    written = list(
        MemoryDurableReceipt.objects.filter(
            session_key=session.session_key, updated_at__gte=started
        ).order_by("created_at", "id")[:100]
    )
    return outcome, written
