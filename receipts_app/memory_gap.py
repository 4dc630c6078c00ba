"""The memory gap's predicate: which receipts the gateway and this console count differently
(docs/MIRROR.md#the-gap; the counting is ``receipts_app.mirror.gap``).

It sits low, beside the models, because the receipts filter (``selectors.ReceiptFilter``'s
``gap``) applies it and the selectors may not import the mirror package (it imports them):
the mirror's model is looked up by name (``apps.get_model``), not imported.
"""

from __future__ import annotations

from django.apps import apps
from django.db.models import Exists, OuterRef, Q, QuerySet

from .statuses import AT_RISK_STATUSES, REPAIR_QUEUE_STATUSES, REPAIR_RUNNING

# Open: something still has to happen to the receipt (at risk, queued or being repaired).
OPEN_STATUSES: tuple[str, ...] = (*AT_RISK_STATUSES, *REPAIR_QUEUE_STATUSES, REPAIR_RUNNING)
GAP_SIDES = ("gateway", "here")


def _mirrored() -> QuerySet:
    """The mirror's copy of the outer receipt (same gateway and key, neither gone upstream nor
    retired by the gateway's upgrade)."""
    mirrored = apps.get_model("mirror", "MirroredReceipt")
    return mirrored.objects.filter(
        source__gateway_id=OuterRef("gateway_id"),
        idempotency_key=OuterRef("idempotency_key"),
        gone_at__isnull=True,
        retired_at__isnull=True,
    )


def gap_q(side: str | None = None) -> Q:
    """Receipts in the gap (``side``: only those open at the ``gateway`` or ``here``)."""
    gateway_open = ~Q(status__in=OPEN_STATUSES) & Q(
        Exists(_mirrored().filter(source_status__in=OPEN_STATUSES))
    )
    here_open = Q(status__in=OPEN_STATUSES) & Q(
        Exists(_mirrored().exclude(source_status__in=OPEN_STATUSES))
    )
    if side == "gateway":
        return gateway_open
    if side == "here":
        return here_open
    return gateway_open | here_open
