"""Console pages of operations: liveness (viewer and up) and alerts (admins)."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from receipts_app.console.helpers import VIEW_PERM, HtmxHttpRequest, console_view

from .liveness import liveness_report


@require_GET
@console_view(VIEW_PERM)
def liveness(request: HtmxHttpRequest) -> HttpResponse:
    context = {"report": liveness_report()}
    template = "operations/liveness.html"
    if request.htmx and request.htmx.target == "liveness-body":
        template = "operations/_liveness_body.html"
    return render(request, template, context)
