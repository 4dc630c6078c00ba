"""Celery tasks of operations: alert evaluation (from beat) and alert delivery (with backoff)."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.db import InterfaceError, OperationalError

_RETRY: dict[str, Any] = {
    "acks_late": True,
    "autoretry_for": (OperationalError, InterfaceError),
    "retry_backoff": 5,
    "retry_backoff_max": 120,
    "max_retries": 5,
}


@shared_task(soft_time_limit=120, time_limit=150, **_RETRY)
def evaluate_alerts() -> dict[str, int]:
    from .alerts.evaluate import evaluate_alerts as evaluate

    out = evaluate()
    return {
        "opened": out.opened,
        "resolved": out.resolved,
        "suppressed": out.suppressed,
        "deliveries": len(out.deliveries),
    }


@shared_task(soft_time_limit=60, time_limit=90, **_RETRY)
def deliver_alert(delivery_id: int) -> dict[str, Any]:
    from .alerts.delivery import attempt_delivery

    outcome = attempt_delivery(delivery_id)
    if outcome.retry_in_s is not None:
        deliver_alert.apply_async((delivery_id,), countdown=outcome.retry_in_s)
    return {"delivery": delivery_id, "state": outcome.state, "error": outcome.error}


@shared_task(soft_time_limit=240, time_limit=300, **_RETRY)
def track_time_at_risk() -> dict[str, int]:
    from .time_at_risk import track_time_at_risk as track

    out = track()
    return {"opened": out.opened, "closed": out.closed}


@shared_task(soft_time_limit=60, time_limit=90, ignore_result=True)
def prune_embedded_broker() -> int:
    """Delete the embedded broker's long-delivered rows (kombu keeps them; the file would grow)."""
    from django.conf import settings

    from opensquilla_site import embedded_broker

    if not embedded_broker.is_embedded(settings.CELERY_BROKER_URL):
        return 0
    return embedded_broker.prune_delivered(settings.CELERY_BROKER_URL)


@shared_task(soft_time_limit=240, time_limit=300, ignore_result=True)
def read_gateway_links() -> dict[str, str]:
    """Ask every linked gateway for its memory verdict and store it (never raises for a
    gateway: each failure is the link's stored state)."""
    import logging

    from .gateway_link.service import refresh_gateway_links

    try:
        return refresh_gateway_links().states
    except Exception as exc:  # noqa: BLE001 - e.g. the database itself: logged, next run retries
        logging.getLogger(__name__).exception("the gateway link readings could not run")
        return {"error": type(exc).__name__}


@shared_task(soft_time_limit=60, time_limit=90, ignore_result=True)
def run_gateway_repairs(gateway: str, agent: str, actor: list[str]) -> dict[str, Any]:
    """An admin's "run due repairs", off the web request: ask the gateway (within
    OPENSQUILLA_GATEWAY_REPAIR_TIMEOUT) and record its answer in the audit trail. Never
    retried: the gateway may have repaired already, and the admin can ask again."""
    from opensquilla_site.acting import Actor

    from .gateway_link.service import RepairRunRefused
    from .gateway_link.service import run_gateway_repairs as run

    who = Actor(*actor)
    try:
        outcome = run(gateway, agent, actor=who)
    except (KeyError, RepairRunRefused) as exc:
        # Unlinked (or no longer allowed) since it was queued: recorded, never silent.
        return _record_refused_run(gateway, agent, who, str(exc))
    return {"state": outcome.state, "count": len(outcome.results), "recorded": outcome.recorded}


def _record_refused_run(gateway: str, agent: str, actor: Any, reason: str) -> dict[str, Any]:
    from opensquilla_site.acting import acting_as
    from receipts_app import audit

    from .gateway_link.service import REPAIR_RUN_ACTION

    with acting_as(actor):
        audit.record_event(
            receipt_id="",
            gateway=gateway,
            action=REPAIR_RUN_ACTION,
            outcome="refused",
            reason=reason,
            details={"via": "gateway_link", "gateway": gateway, "agent": agent, "count": 0},
        )
    return {"state": "refused", "count": 0, "recorded": 0}
