"""The fleet: every gateway with what an operator asks of it first (``GET /api/v1/gateways``).

For each gateway: its name, where it is followed from and what it last ran, its mirror
sources' state, its one state (the worst of its agents', as ``receipts_app.health.verdicts``
gives it to every surface), and the at-risk counts (memory at risk as the overview card,
/metrics and alerts count it, memory safety errors, the repair backlog, repairs given up), each
with the ``ReceiptFilter`` params that list exactly the rows it counts, what health's
hash-mismatch heuristic found in its agents' windows (the rows an agent card links, by id: a
gateway at risk by the heuristic alone shows them, not a bare "0 at risk"), and its mirror in
one line (the
worst state of its followed sources and their largest lag). The counts come from the counts
table (one read for every gateway) and the mirror's state from its one reader, so the cost
grows neither with the ledger nor with the fleet: four queries, or two when the caller has
read the counts and the mirror already, plus one for how much of each gateway's saved memory the
checkpoint scrub verified within its full cycle (``checkpoints``). The heuristic's match probe
is read in the counts' statement (``health.counts_and_verdicts``); one more statement reads the
flagged agents' windows, only when it flags any. Each gateway also says who
repairs its rows (``repairs``: ``gateway`` or ``console``, ``receipts_app.handover``) and, once
its ledger was retired by its upgrade to 0.5.5+, when that was seen and how many receipts it
retired. The console's fleet view (the overview) and
``GET /api/v1/gateways`` both read :func:`fleet`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sessions_app.gateways import Gateway, gateway_scope

from .counts import CountRow, per_status
from .handover import REPAIRS_LABELS, repairs_of, retired_counts
from .health import counts_and_verdicts, verdicts
from .mirror.state import FAILING, HEALTHY_STATUSES, IMPORTING, OK, STOPPED, WARNING, mirror_states
from .scrub.summary import VerifiedSummary, verified_summary
from .selectors import ReceiptFilter, verified_window_ms
from .statuses import (
    AT_RISK_STATUSES,
    MEMORY_SAFETY_ERROR_STATUSES,
    REPAIR_QUEUE_STATUSES,
    TERMINAL_REPAIR_STATUSES,
)
from .verdict import LABELS

AT_RISK = {
    # health.at_risk_by_gateway_agent counts the same statuses: one meaning of "at risk".
    "memory_at_risk": AT_RISK_STATUSES,
    "memory_safety_errors": MEMORY_SAFETY_ERROR_STATUSES,
    "repair_backlog": REPAIR_QUEUE_STATUSES,
    "terminal_repairs": TERMINAL_REPAIR_STATUSES,
}


# The mirror states, worst first (receipts_app.mirror.state names them).
_MIRROR_ORDER = (STOPPED, FAILING, WARNING, IMPORTING, OK)


def mirror_summary(states: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """A gateway's mirror in one line: the worst state of its followed sources, whether all
    are healthy, and the largest ``lag_seconds`` (what /metrics and alerts read); status
    None when nothing follows it (rows written here, or imported once)."""
    if not states:
        return {"status": None, "healthy": None, "lag_seconds": None, "lag_ms": None, "sources": 0}
    worst = min(states, key=lambda s: _MIRROR_ORDER.index(s["status"]))["status"]
    lags = [s["lag_seconds"] for s in states if s["lag_seconds"] is not None]
    lag = max(lags) if lags else None
    return {
        "status": worst,
        "healthy": worst in HEALTHY_STATUSES,
        "lag_seconds": lag,
        "lag_ms": None if lag is None else round(lag * 1000),
        "sources": len(states),
    }


def fleet(
    rows: Sequence[CountRow] | None = None,
    states: Sequence[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """One dict per gateway (every gateway, or the one an edge chose), by name.

    ``rows`` (``receipt_counts()``) and ``states`` (``mirror_states()``): what the caller
    read already, in the same gateway scope; read here when None."""
    scope = gateway_scope()
    gateways = Gateway.objects.all() if scope is None else Gateway.objects.filter(name=scope)
    # The counts and every agent's one state (the heuristic's probe read with the counts).
    rows, judged = counts_and_verdicts() if rows is None else (rows, verdicts(rows))
    states = mirror_states() if states is None else states
    out = []
    # Split once, so the work grows with the rows, not with rows times gateways.
    rows_of: dict[str, list[CountRow]] = {}
    for row in rows:
        rows_of.setdefault(row.gateway_id, []).append(row)
    states_of: dict[str, list[dict[str, Any]]] = {}
    for state in states:
        states_of.setdefault(state["gateway"], []).append(state)
    retired = retired_counts()
    verified = verified_summary(scope, rows=rows)
    for gateway in gateways.order_by("name"):
        mine = rows_of.get(gateway.name, [])
        checkpoints = verified.get(gateway.name) or VerifiedSummary(
            gateway.name, 0, 0, 0, 0, window_seconds=verified_window_ms() / 1000
        )
        at_risk = {}
        for name, statuses in AT_RISK.items():
            count = sum(per_status(mine, statuses=statuses).values())
            listed = ReceiptFilter(gateway=gateway.name, statuses=statuses)
            at_risk[name] = {"count": count, "filter": listed.to_params()}
        followed = states_of.get(gateway.name, [])
        # The gateway's one state: the worst of its agents' (health.verdicts).
        own = judged.state(gateway.name, None)
        found = judged.found(gateway.name, None)
        out.append(
            {
                "name": gateway.name,
                "display_name": gateway.label,
                "source": gateway.source,
                "opensquilla_version": gateway.opensquilla_version,
                "schema_version": gateway.schema_version,
                "last_seen_at": gateway.last_seen_at,
                "receipts": sum(r.count for r in mine),
                "at_risk": at_risk,
                # The heuristic's rows (by id, newest first): what its agents' cards link.
                "hash_mismatches": {"count": found.count, "filter": found.filter},
                "state": own.value,
                "state_label": LABELS[own],
                "mirror": followed,
                "mirror_summary": mirror_summary(followed),
                # Who repairs its rows (docs/MIRROR.md, "Nothing done to a gateway unasked").
                "repairs": repairs_of(gateway),
                "repairs_label": REPAIRS_LABELS[repairs_of(gateway)],
                # Its upgrade to 0.5.5+ retired its flush and repair rows (V044).
                "ledger_retired_at": gateway.ledger_retired_at,
                "retired_receipts": retired.get(gateway.name, 0),
                "checkpoints": checkpoints.to_dict(),
                # The same, as the object the console's templates render.
                "checkpoints_summary": checkpoints,
            }
        )
    return out
