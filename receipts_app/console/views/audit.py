"""The audit log: every status change and operator action, from every surface."""

from __future__ import annotations

from django.http import HttpResponse
from django.views.decorators.http import require_GET

from opensquilla_site.exceptions import ValidationFailed

from ...models import ReceiptEvent
from .. import selectors as cs
from ..helpers import VIEW_EVENTS_PERM, HtmxHttpRequest, console_view, int_param, render_page


@require_GET
@console_view(VIEW_EVENTS_PERM)
def audit_log(request: HtmxHttpRequest) -> HttpResponse:
    context: dict = {
        "surfaces": ReceiptEvent.SURFACES,
        "filters": {},
        "rows": [],
        "next_cursor": None,
    }
    status = 200
    try:
        filters = cs.audit_filters_from(request.GET)
        page = cs.page_audit_events(
            filters,
            cursor=request.GET.get("cursor"),
            limit=int_param(request, "limit", 50, lo=10, hi=200),
        )
        context.update(filters=filters, rows=page.rows, next_cursor=page.next_cursor)
    except ValidationFailed as exc:
        context["filter_error"] = exc
        status = 400
    return render_page(request, "console/audit.html", context, status=status)
