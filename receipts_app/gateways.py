"""The fleet: every gateway with what an operator asks of it first (``GET /api/v1/gateways``).

For each gateway: its name, where it is followed from and what it last ran, its mirror
sources' state, and the at-risk counts (memory at risk as the overview card, /metrics and
alerts count it, memory safety errors, the repair backlog, repairs given up), each with the ``ReceiptFilter`` params that list exactly the rows it counts. The
counts come from the counts table (one read for every gateway) and the mirror's state from
its one reader, so the cost does not grow with the ledger.
"""

from __future__ import annotations

from typing import Any

from sessions_app.gateways import Gateway, gateway_scope

from .counts import per_status, receipt_counts
from .mirror.state import mirror_states
from .selectors import ReceiptFilter
from .statuses import (
    AT_RISK_STATUSES,
    MEMORY_SAFETY_ERROR_STATUSES,
    REPAIR_QUEUE_STATUSES,
    TERMINAL_REPAIR_STATUSES,
)

AT_RISK = {
    # health.at_risk_by_gateway_agent counts the same statuses: one meaning of "at risk".
    "memory_at_risk": AT_RISK_STATUSES,
    "memory_safety_errors": MEMORY_SAFETY_ERROR_STATUSES,
    "repair_backlog": REPAIR_QUEUE_STATUSES,
    "terminal_repairs": TERMINAL_REPAIR_STATUSES,
}


def fleet() -> list[dict[str, Any]]:
    """One dict per gateway (every gateway, or the one an edge chose), by name."""
    scope = gateway_scope()
    gateways = Gateway.objects.all() if scope is None else Gateway.objects.filter(name=scope)
    rows = receipt_counts()
    states = mirror_states()
    out = []
    for gateway in gateways.order_by("name"):
        at_risk = {}
        for name, statuses in AT_RISK.items():
            count = sum(per_status(rows, gateway=gateway.name, statuses=statuses).values())
            listed = ReceiptFilter(gateway=gateway.name, statuses=statuses)
            at_risk[name] = {"count": count, "filter": listed.to_params()}
        out.append(
            {
                "name": gateway.name,
                "display_name": gateway.label,
                "source": gateway.source,
                "opensquilla_version": gateway.opensquilla_version,
                "schema_version": gateway.schema_version,
                "last_seen_at": gateway.last_seen_at,
                "receipts": sum(r.count for r in rows if r.gateway_id == gateway.name),
                "at_risk": at_risk,
                "mirror": [s for s in states if s["gateway"] == gateway.name],
            }
        )
    return out
