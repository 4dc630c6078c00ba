"""One attempt of one delivery, recorded whatever happens, and when to try again.

The delivery is claimed (``pending`` → ``sending``) by a compare-and-set before the network
call and settled after it, so no transaction stays open while a receiver is slow and two
workers never send the same delivery twice. A ``sending`` row whose worker died goes back to
``pending`` through ``sweep_deliveries`` (run by the evaluation task).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from celery import current_app
from django.db import transaction
from django.db.models import F

from opensquilla_site import timeutil

from ..models import AlertDelivery, AlertDeliveryAttempt
from . import channels

logger = logging.getLogger(__name__)

DELIVER_TASK = "operations_app.tasks.deliver_alert"
# Seconds to wait after attempt 1, 2, …; after the last one the delivery has failed.
BACKOFF_S = (10, 30, 90, 270, 810)
MAX_ATTEMPTS = len(BACKOFF_S) + 1
# A claimed delivery not settled within this time is assumed lost with its worker.
SENDING_STALE_MS = 10 * 60 * 1000


@dataclass(frozen=True)
class AttemptOutcome:
    delivery_id: int
    state: str  # sent, pending (will retry), failed, skipped (not pending)
    retry_in_s: float | None = None
    error: str = ""


def _claim(delivery_id: int, now: int) -> AlertDelivery | None:
    claimed = AlertDelivery.objects.filter(pk=delivery_id, state="pending").update(
        state="sending", attempts=F("attempts") + 1, next_attempt_at=now + SENDING_STALE_MS
    )
    if not claimed:
        return None
    return AlertDelivery.objects.select_related("rule").get(pk=delivery_id)


def attempt_delivery(delivery_id: int) -> AttemptOutcome:
    now = timeutil.now_ms()
    delivery = _claim(delivery_id, now)
    if delivery is None:
        return AttemptOutcome(delivery_id, "skipped")
    started = time.monotonic()
    error: channels.DeliveryError | None = None
    status_code: int | None = None
    try:
        status_code = channels.send(delivery.rule, delivery.payload)
    except channels.DeliveryError as exc:
        error = exc
        status_code = exc.status_code
    except Exception as exc:  # noqa: BLE001 - a bug in a sender must still be recorded
        error = channels.DeliveryError(f"unexpected error ({type(exc).__name__})")
        logger.exception("alert delivery %s failed unexpectedly", delivery_id)
    duration_ms = int((time.monotonic() - started) * 1000)
    finished = timeutil.now_ms()
    with transaction.atomic():
        AlertDeliveryAttempt.objects.create(
            delivery=delivery,
            number=delivery.attempts,
            attempted_at=now,
            ok=error is None,
            status_code=status_code,
            error=error.message if error else "",
            duration_ms=duration_ms,
        )
        if error is None:
            AlertDelivery.objects.filter(pk=delivery.pk).update(
                state="sent", sent_at=finished, next_attempt_at=None, last_error=""
            )
            return AttemptOutcome(delivery.pk, "sent")
        # Rule id and delivery id only: the target and secret never reach the logs.
        logger.warning(
            "alert delivery %s of rule %s, attempt %s: %s",
            delivery.pk,
            delivery.rule_id,
            delivery.attempts,
            error.message,
        )
        if error.permanent or delivery.attempts >= MAX_ATTEMPTS:
            AlertDelivery.objects.filter(pk=delivery.pk).update(
                state="failed", next_attempt_at=None, last_error=error.message
            )
            return AttemptOutcome(delivery.pk, "failed", error=error.message)
        wait = BACKOFF_S[delivery.attempts - 1]
        AlertDelivery.objects.filter(pk=delivery.pk).update(
            state="pending", next_attempt_at=finished + wait * 1000, last_error=error.message
        )
        return AttemptOutcome(delivery.pk, "pending", retry_in_s=wait, error=error.message)


def enqueue(delivery_ids: list[int], countdown: float | None = None) -> None:
    """Hand deliveries to a worker after the current transaction commits."""

    def publish() -> None:
        # By name from the app's registry: operations_app.tasks imports this package, not
        # the other way round.
        deliver_alert = current_app.tasks[DELIVER_TASK]
        for delivery_id in delivery_ids:
            try:
                if countdown is None:
                    deliver_alert.apply_async((delivery_id,))
                else:
                    deliver_alert.apply_async((delivery_id,), countdown=countdown)
            except Exception:  # noqa: BLE001 - the sweep re-sends what could not be published
                logger.warning("could not enqueue alert delivery %s", delivery_id, exc_info=True)

    transaction.on_commit(publish)


def sweep_deliveries(now: int | None = None) -> int:
    """Re-enqueue due deliveries whose message was lost; release claims of dead workers."""
    now = timeutil.now_ms() if now is None else now
    AlertDelivery.objects.filter(state="sending", next_attempt_at__lt=now).update(state="pending")
    # Only those overdue by a minute: a retry scheduled with a countdown is on its way.
    due = list(
        AlertDelivery.objects.filter(state="pending", next_attempt_at__lt=now - 60_000)
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:500]
    )
    if due:
        enqueue(due)
    return len(due)
