"""An agent's page: our health for the agent beside what each linked gateway itself says
about it (the stored gateway-link readings, never a live call), and, for admins, "ask the
gateway to run its due repairs".

It lives here, not with the receipts console, because it reads the gateway link
(operations_app), which receipts_app may not import; it uses the console's helpers and
looks like every console page."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from opensquilla_site.timeutil import now_ms
from receipts_app.console.helpers import (
    OPERATE_PERM,
    VIEW_PERM,
    HtmxHttpRequest,
    can_operate,
    console_actor,
    console_role,
    console_view,
    render_error,
    render_page,
)
from receipts_app.health import counts_and_verdicts, health_for
from sessions_app.gateways import gateway_scope
from sessions_app.keys import normalize_agent_id

from .gateway_link.service import RepairRunRefused, check_can_run_repairs, request_gateway_repairs
from .gateway_link.views import agent_link_views


@require_GET
@console_view(VIEW_PERM)
def agent_detail(request: HtmxHttpRequest, agent_id: str) -> HttpResponse:
    agent = normalize_agent_id(agent_id)
    # The counts and every agent's one state (its own, the link panel's "here" side), one read.
    rows, states = counts_and_verdicts()
    # (None, agent): this agent over the gateways in scope (``?gateway=`` narrows it).
    (health,) = health_for(
        [(None, agent)], rows, now=now_ms(), count_checked=False, findings=states.findings
    )
    context = {
        "agent_id": agent,
        "health": health,
        "verdicts": states,
        "gateway": gateway_scope(),
        "receipt_total": sum(r.count for r in rows if r.agent_id == agent),
        "gateway_rows": agent_link_views(agent, rows, states),
        "is_admin": console_role(request.user) == "admin",
        # Viewers see the link's reachability only; its messages name addresses and errors.
        "show_details": can_operate(request.user),
        "can_operate": can_operate(request.user),
    }
    return render_page(request, "console/agent_detail.html", context)


@require_POST
@console_view(VIEW_PERM, OPERATE_PERM)
def agent_gateway_repairs(request: HtmxHttpRequest, agent_id: str) -> HttpResponse:
    """Ask the gateway (``?gateway=``) to run its due repairs for this agent: admins only."""
    agent = normalize_agent_id(agent_id)
    if console_role(request.user) != "admin":
        return render_error(
            request,
            "Your role does not allow this: only an admin may ask a gateway to run its repairs.",
            status=403,
            title="Not allowed",
        )
    name = gateway_scope()
    if name is None:
        return render_error(request, "Name the gateway (?gateway=NAME).", status=400)
    try:
        check_can_run_repairs(name)
        if request.POST.get("confirm") != "yes":
            # The gateway writes into its own workspace: the first post asks, the second runs.
            return render_page(
                request,
                "console/gateway_repairs_confirm.html",
                {"gateway": name, "agent_id": agent},
            )
        # Queued, never called here: a gateway that hangs must not hold a web worker.
        queued = request_gateway_repairs(name, agent, actor=console_actor(request))
    except KeyError:
        return render_error(request, f"Gateway not found: {name}", status=404, title="Not found")
    except RepairRunRefused as exc:
        return render_error(request, str(exc), status=409)
    messages.success(request, queued)
    return redirect(reverse("agents:detail", args=[agent]) + f"?gateway={name}")
