"""Which receipts a gateway's upgrade to 0.5.5+ retired (docs/MIRROR.md, "Followed through the
0.5.5 upgrade").

Upstream's migration V044 deletes every flush, pre-image and repair receipt of the gateway's
ledger. The mirror's reconciliation records each such row it had followed as retired
(``MirroredReceipt.retired_at``, ``receipts_app.mirror.reconcile``) and moves an open one to
``retired_upstream``. This predicate sits low, beside the models, so the repair worker (below
the mirror) can ask it: the mirror's model is looked up by name, not imported.
"""

from __future__ import annotations

from django.apps import apps
from django.db.models import Exists, OuterRef, Q

from .statuses import RETIRED_UPSTREAM


def retired_q() -> Q:
    """Receipts retired by their gateway's upgrade: moved to ``retired_upstream``, or closed
    ones the mirror marked retired (same gateway and key)."""
    mirrored = apps.get_model("mirror", "MirroredReceipt")
    marked = mirrored.objects.filter(
        source__gateway_id=OuterRef("gateway_id"),
        idempotency_key=OuterRef("idempotency_key"),
        retired_at__isnull=False,
    )
    return Q(status=RETIRED_UPSTREAM) | Q(Exists(marked))
