"""The overview: is any memory at risk, where, and since when."""

from __future__ import annotations

from django.http import HttpResponse
from django.views.decorators.http import require_GET

from ...counts import per_status, receipt_counts
from ...health import cards
from ...statuses import FAILURE_STATUSES, KNOWN_STATUSES
from .. import selectors as cs
from ..helpers import VIEW_PERM, HtmxHttpRequest, can_operate, console_view, render_page
from ..middleware import unknown_gateway


@require_GET
@console_view(VIEW_PERM)
def overview(request: HtmxHttpRequest) -> HttpResponse:
    range_name = request.GET.get("range", "24h")
    timeline = cs.receipts_over_time(range_name)
    rows = receipt_counts()  # exact, and read once for every count on the page
    missing = unknown_gateway(request, rows)  # ?gateway= naming no gateway: a message
    if missing is not None:
        return missing
    counts = per_status(rows)
    # Every card's health (no count of rows checked: the page shows none) and its one state.
    health, states = cards(rows)
    context = {
        "status_counts": [(s, counts.get(s, 0)) for s in KNOWN_STATUSES if counts.get(s)],
        "failure_statuses": FAILURE_STATUSES,
        "scope_counts": cs.counts_by("scope", rows),
        "agent_counts": cs.counts_by("agent_id", rows),
        "health": health,
        "verdicts": states,
        "failure_groups": cs.failure_groups(),
        # Several gateways' rows on the page: every card and group names its gateway, `local`
        # too (else two gateways' "main" read alike). From the counts read above: no query.
        "show_gateway": len({row.gateway_id for row in rows}) > 1,
        "timeline": timeline,
        "bars": timeline.bars(),
        "ranges": list(cs.RANGES),
        "can_operate": can_operate(request.user),
    }
    return render_page(request, "console/overview.html", context)
