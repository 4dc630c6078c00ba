"""The overview's fleet view, as its own fragment (loaded by the overview after it renders,
like the time-at-risk panel), so the overview stays within its query budget whatever the
fleet: this fragment reads the gateways, the counts and the mirror, three queries for any
number of gateways.

Opened directly (not an htmx request: the "Gateways" link of the console's header, a
bookmark), the same fragment comes inside the console's page, and lists the gateway of a
single-gateway console too (the overview leaves that one out: its cards already are it)."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from ..fleet import fleet_view
from ..helpers import VIEW_PERM, HtmxHttpRequest, console_view
from ..middleware import gateway_not_found


@require_GET
@console_view(VIEW_PERM)
def fleet(request: HtmxHttpRequest) -> HttpResponse:
    view = fleet_view()
    names = [str(row["name"]) for row in view.gateways]
    if view.chosen is not None and view.chosen not in names:
        return gateway_not_found(request, view.chosen, names)
    if request.htmx:
        return render(request, "console/_fleet.html", {"fleet": view})
    return render(request, "console/fleet.html", {"fleet": view, "whole_page": True})
