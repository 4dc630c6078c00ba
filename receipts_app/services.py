"""Trigger services: "checkpoint now" and "flush now", queued or in-process, and the body of
the queued checkpoint.

Surfaces (console, API, CLI) call ``queue_checkpoint`` / ``queue_flush`` (checked here, then
sent through ``enqueue`` after commit; ``queued_work_warning`` says when nothing will run it) or ``checkpoint_now`` / ``flush_now`` (run in the
caller's process). The input is checked before anything is queued, so a bad request gets a
clear error instead of a task that fails later. Each trigger leaves an audit event keyed by
the session. Requeued checkpoints are the requeue engine's (``requeue.retake``), not these.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from opensquilla_site.exceptions import ApplicationError, ConflictError
from opensquilla_site.timeutil import now_ms
from sessions_app import services as session_services
from sessions_app.gateways import (
    MisroutedWork,
    check_served,
    current_gateway,
    no_worker_warning_for,
)
from sessions_app.keys import canonicalize_session_key
from sessions_app.models import Session, TranscriptEntry

from . import audit, checkpoint, enqueue
from .audit import Actor
from .checkpoint.attempt import (
    attempt_checkpoint,
    checkpoint_with_deadline,
    failed_result,
    recorded_failure,
    saved_result,
)
from .checkpoint.record import turn_id_problem
from .models import MemoryDurableReceipt

logger = logging.getLogger(__name__)


def _live_session(session_key: str) -> Session:
    session = session_services.get_session(session_key)
    if session is None:
        raise KeyError(f"Session not found: {canonicalize_session_key(session_key)}")
    return session


def _check_turn_id(session: Session, turn_id: str | None) -> None:
    problem = turn_id_problem(session.session_key, turn_id)
    if problem is not None:
        raise ValueError(problem)


def _has_transcript(session: Session) -> bool:
    return TranscriptEntry.objects.here().filter(session_id=session.session_id).exists()


def queue_checkpoint(*, session_key: str, actor: Actor, turn_id: str | None = None) -> str:
    """Queue a checkpoint of the live transcript; returns the Celery task id.

    Raises ``KeyError`` for an unknown session and ``ValueError`` for an empty transcript
    (upstream writes no receipt for that case, so queueing it would leave no trace) or a turn
    id no idempotency key could hold.
    """
    session = _live_session(session_key)
    _check_turn_id(session, turn_id)
    if not _has_transcript(session):
        raise ValueError("checkpoint transcript cannot be empty")
    with transaction.atomic():
        task_id = enqueue.send(
            enqueue.checkpoint_message(
                session.session_key, turn_id=turn_id, source=checkpoint.DEFAULT_SOURCE
            )
        )
        _record_trigger("checkpoint_now", session, actor, task_id, turn_id=turn_id)
    return task_id


def queue_flush(*, session_key: str, actor: Actor) -> str:
    """Queue a flush of the live transcript; returns the Celery task id.

    Raises ``KeyError`` for an unknown session and ``ValueError`` for an empty transcript.
    """
    session = _live_session(session_key)
    if not _has_transcript(session):
        raise ValueError("flush transcript cannot be empty")
    with transaction.atomic():
        task_id = enqueue.send(enqueue.flush_message(session.session_key))
        _record_trigger("flush_now", session, actor, task_id)
    return task_id


def queued_work_warning() -> str | None:
    """What a surface tells the operator with a queued trigger's task id: None, or, when the
    session's gateway (the current one) has a queue no live worker consumes, the same sentence
    a requeue and a plan's dry run carry. The work is queued all the same."""
    return no_worker_warning_for(current_gateway())


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
        gateway=session.gateway_id,
    )


def take_checkpoint(
    *, session_key: str, turn_id: str | None = None, source: str = checkpoint.DEFAULT_SOURCE
) -> dict[str, Any]:
    """Take a queued checkpoint (the ``checkpoint_session`` task's body); never raises for a
    failure, which the ledger already holds as a ``checkpoint_failed`` receipt."""
    with audit.acting_as(audit.WORKER):
        saved, error = attempt_checkpoint(session_key, turn_id=turn_id, source=source)
    if saved is None:
        assert error is not None
        return failed_result(session_key, error)
    return saved_result(saved)


class CheckpointNotRecorded(ApplicationError):
    """The checkpoint failed before even a failure receipt could be written (a timeout)."""

    code = "checkpoint_not_recorded"
    status = 503


def _runs_here(what: str) -> None:
    """In-process work writes this process's workspaces: only for the gateway it serves. Another
    gateway's checkpoint or flush is queued to its own worker instead (409 ``conflict``)."""
    try:
        check_served(current_gateway(), what=what)
    except MisroutedWork as exc:
        raise ConflictError(
            f"{exc}; this process cannot run it in place: queue it (without ?wait=true)"
        ) from exc


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
    _check_turn_id(session, turn_id)
    _runs_here(f"the checkpoint of {session.session_key}")
    _record_trigger("checkpoint_now", session, actor, None, turn_id=turn_id, outcome="in_process")
    with audit.acting_as(actor):
        try:
            return checkpoint_with_deadline(session_key, turn_id=turn_id)
        except (KeyError, ValueError):
            raise
        except Exception as exc:  # noqa: BLE001 - the failure is a receipt; return it
            failed = recorded_failure(session_key, exc)
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
    _runs_here(f"the flush of {session.session_key}")
    _record_trigger("flush_now", session, actor, None, outcome="in_process")
    started = now_ms()
    with audit.acting_as(actor):
        outcome = flush_runtime.flush_session(session.session_key)
    written = list(
        MemoryDurableReceipt.objects.here()
        .filter(session_key=session.session_key, updated_at__gte=started)
        .order_by("created_at", "id")[:100]
    )
    return outcome, written
