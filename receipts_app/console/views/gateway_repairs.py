"""A gateway's repairs page: who repairs its rows (the gateway's own loop, or this console after
an admin handed them over), what its upgrade to 0.5.5+ retired, and the raw-fallback archives it
left undistilled, per agent (docs/MIRROR.md). Reached from the fleet view's "repairs" cell.

Reads: the gateway, its retired count, its undistilled archives (``receipts_app.handover``).
An admin changes the setting here (``handover.set_repairs``, audited); nobody else can.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from sessions_app.gateways import Gateway, GatewayNameError, known_gateway, using_gateway

from ... import handover
from ..helpers import (
    VIEW_PERM,
    HtmxHttpRequest,
    console_actor,
    console_role,
    console_view,
    operator_note,
    render_error,
    render_page,
)


@require_http_methods(["GET", "POST"])
@console_view(VIEW_PERM)
def gateway_repairs(request: HtmxHttpRequest, name: str) -> HttpResponse:
    try:
        gateway = known_gateway(name)
    except GatewayNameError as exc:
        return render_error(request, str(exc), status=400)
    except KeyError:
        return render_error(request, f"Gateway not found: {name}", status=404, title="Not found")
    is_admin = console_role(request.user) == "admin"
    if request.method == "POST":
        return _change(request, gateway, is_admin=is_admin)
    with using_gateway(None):  # this gateway's rows whatever the page was scoped to
        archives = handover.undistilled_archives(gateway.name)
        retired = handover.retired_counts().get(gateway.name, 0)
    repairs = handover.repairs_of(gateway)
    context = {
        "gateway": gateway,
        "repairs": repairs,
        "repairs_label": handover.REPAIRS_LABELS[repairs],
        "retired": retired,
        "groups": archives,
        "archive_total": sum(len(g.archives) for g in archives),
        "is_admin": is_admin,
    }
    return render_page(request, "console/gateway_repairs.html", context)


def _change(request: HtmxHttpRequest, gateway: Gateway, *, is_admin: bool) -> HttpResponse:
    if not is_admin:
        return render_error(
            request,
            "Your role does not allow this: only an admin may decide who repairs a gateway's rows.",
            status=403,
            title="Not allowed",
        )
    wanted = request.POST.get("repairs", "")
    try:
        handover.set_repairs(
            gateway.name, wanted, actor=console_actor(request), reason=operator_note(request)
        )
    except handover.HandoverError as exc:
        return render_error(request, str(exc), status=400)
    messages.success(request, f"gateway {gateway.name}: repairs: {handover.REPAIRS_LABELS[wanted]}")
    return redirect(reverse("receipts:gateway_repairs", args=[gateway.name]))
