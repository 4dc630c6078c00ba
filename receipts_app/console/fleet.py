"""The overview's fleet view: one row per gateway (``receipts_app.gateways.fleet``, the same
service ``GET /api/v1/gateways`` reads), shown once the console holds more than one gateway.

A single-gateway console (``local`` only, the README's first run) shows no fleet: its
overview's cards already are that gateway. An overview scoped to one gateway (``?gateway=``)
still lists the whole fleet, with the chosen gateway marked, so the operator can move to
another one or back to all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sessions_app.gateways import gateway_scope, using_gateway

from ..gateways import fleet


@dataclass(frozen=True)
class FleetView:
    gateways: list[dict[str, Any]] = field(default_factory=list)
    chosen: str | None = None  # the gateway the overview is scoped to, if any

    @property
    def shown(self) -> bool:
        return len(self.gateways) > 1


def fleet_view() -> FleetView:
    """Every gateway with its counts, state and mirror (a fixed number of queries, for any
    number of gateways: ``receipts_app.gateways``)."""
    chosen = gateway_scope()
    with using_gateway(None):  # the whole fleet, whatever gateway the page shows
        return FleetView(fleet(), chosen)
