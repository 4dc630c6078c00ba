"""The audit timeline (``ReceiptEvent``): who changed what, from which surface, and why.

Services record operator actions explicitly. Status changes made by the ledger itself
(claims, stale recovery, upserts that move a row) are recorded by the ledger with the
actor and surface of the current ``acting_as`` block, "system" when there is none (the actor
and its context live in ``opensquilla_site.acting``, so session surfaces can set them too).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import models

from opensquilla_site.acting import (  # re-exported: every caller names them on this module
    SURFACES,
    SYSTEM,
    WORKER,
    Actor,
    acting_as,
    current_actor,
)
from opensquilla_site.timeutil import now_ms
from sessions_app.gateways import current_gateway

from .models import ReceiptEvent

__all__ = [
    "SURFACES",
    "SYSTEM",
    "WORKER",
    "Actor",
    "acting_as",
    "build_event",
    "current_actor",
    "open_requeue",
    "record_event",
    "record_events",
    "record_requeue_complete",
    "REQUEUE_COMPLETE",
]


def build_event(
    *,
    receipt_id: str,
    session_key: str = "",
    action: str,
    from_status: str | None = None,
    to_status: str | None = None,
    outcome: str | None = None,
    reason: str | None = None,
    plan_id: str | None = None,
    details: dict[str, Any] | None = None,
    actor: Actor | None = None,
    at_ms: int | None = None,
    gateway: str | None = None,
) -> ReceiptEvent:
    """An unsaved event. ``gateway``: the gateway of the row it is about; the current gateway
    (``sessions_app.gateways.current_gateway``) when the caller has no row in hand."""
    who = actor or current_actor()
    return ReceiptEvent(
        receipt_id=receipt_id,
        session_key=session_key,
        gateway_id=gateway or current_gateway(),
        created_at=at_ms if at_ms is not None else now_ms(),
        actor=who.name[:150],
        surface=who.surface,
        action=action,
        from_status=from_status,
        to_status=to_status,
        outcome=outcome,
        reason=reason,
        plan_id=plan_id,
        details=details or {},
    )


def record_event(**kwargs: Any) -> ReceiptEvent:
    event = build_event(**kwargs)
    event.save(force_insert=True)
    return event


def record_events(events: Sequence[ReceiptEvent]) -> None:
    if events:
        ReceiptEvent.objects.bulk_create(events, batch_size=500)


# --- requeues and their completion ------------------------------------------------------------

REQUEUE_COMPLETE = "requeue_complete"


def open_requeue(receipt_id: str) -> ReceiptEvent | None:
    """The requeue that put the row back to work and has not completed yet, if any.

    Its ``plan_id`` says which plan (if any) the worker's completion belongs to: the worker
    learns it here, from the trail, so work re-sent by the sweep or redelivered by the broker
    is attributed the same way as the original message.
    """
    last = (
        ReceiptEvent.objects.filter(receipt_id=receipt_id)
        .filter(models.Q(action="requeue", outcome="requeued") | models.Q(action=REQUEUE_COMPLETE))
        .order_by("-created_at", "-id")
        .first()
    )
    return last if last is not None and last.action == "requeue" else None


def record_requeue_complete(
    *,
    receipt_id: str,
    session_key: str,
    from_status: str | None,
    to_status: str,
    outcome: str,
    reason: str | None = None,
    details: dict[str, Any] | None = None,
    only_if_requeued: bool = False,
    gateway: str | None = None,
) -> ReceiptEvent | None:
    """The worker's final word on requeued work (``recovered`` or ``failed``), carrying the
    plan id of the requeue it completes. With ``only_if_requeued`` nothing is recorded for
    work no requeue is waiting on (a repair the beat found by itself)."""
    opened = open_requeue(receipt_id)
    if opened is None and only_if_requeued:
        return None
    return record_event(
        receipt_id=receipt_id,
        session_key=session_key,
        action=REQUEUE_COMPLETE,
        from_status=from_status,
        to_status=to_status,
        outcome=outcome,
        reason=reason,
        plan_id=opened.plan_id if opened is not None else None,
        details=details,
        gateway=gateway,
    )
