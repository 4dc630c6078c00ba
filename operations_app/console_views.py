"""Console pages of operations: liveness (viewer and up) and alerts (admins)."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from opensquilla_site.exceptions import NotFoundError
from receipts_app.console.helpers import (
    VIEW_PERM,
    HtmxHttpRequest,
    can_operate,
    console_view,
    render_panel,
    shown_to,
)
from sessions_app.gateways import (
    Gateway,
    GatewayNameError,
    using_gateway,
    validate_gateway_name,
)

from .alerts.forms import AlertRuleForm
from .alerts.service import send_test, store_rule
from .alerts.validation import masked_target
from .exposure import liveness_for_viewer
from .gateway_link.views import agent_link_views
from .liveness import liveness_report
from .models import AlertDelivery, AlertRule
from .time_at_risk import time_at_risk_by_agent


@require_GET
@console_view(VIEW_PERM)
def liveness(request: HtmxHttpRequest) -> HttpResponse:
    # Viewers see each process's kind, gateway and state, not its host (exposure.py).
    context = {"report": shown_to(request.user, liveness_report(), liveness_for_viewer)}
    template = "operations/liveness.html"
    if request.htmx and request.htmx.target == "liveness-body":
        template = "operations/_liveness_body.html"
    return render(request, template, context)


@require_GET
@console_view(VIEW_PERM)
def time_at_risk_panel(request: HtmxHttpRequest) -> HttpResponse:
    """The overview's time-at-risk panel, loaded by the overview after it renders.

    A separate request keeps the overview itself within its query budget and quick: the panel
    reads the rollups (two queries) while the operator already sees the counts.
    """
    context = {
        "agents": time_at_risk_by_agent(),
        # The same agent name on two gateways is two rows: name the gateway when there are several.
        "show_gateway": Gateway.objects.count() > 1,
    }
    return render_panel(
        request,
        "operations/_time_at_risk.html",
        context,
        title="Time at risk",
        empty_text="No failure has been tracked yet.",
    )


@require_GET
@console_view(VIEW_PERM)
def gateway_link_panel(request: HtmxHttpRequest) -> HttpResponse:
    """The overview's "gateway's own view" panel, loaded after the overview renders (its own
    request, so the overview keeps its query budget), from the stored readings only: no
    gateway is asked here. Empty without a linked gateway. ``?gateway=`` scopes it."""
    name = request.GET.get("gateway") or None
    try:
        if name is not None:
            validate_gateway_name(name)
    except GatewayNameError as exc:
        return HttpResponse(str(exc), status=400, content_type="text/plain")
    with using_gateway(name):
        rows = agent_link_views()
    return render_panel(
        request,
        "console/_gateway_link_panel.html",
        # Viewers see the link's reachability only; its messages name addresses and errors.
        {
            "rows": rows,
            "agent_page": False,
            "is_admin": False,
            "show_details": can_operate(request.user),
        },
        title="The gateway's own view",
        empty_text="No gateway is linked: no reading of a gateway's own view to show.",
    )


# --- alerts (admins) ------------------------------------------------------------------------
ALERTS_PERM = "operations_app.change_alertrule"
RECENT_DELIVERIES = 20


def _alert_rule(rule_id: int) -> AlertRule:
    rule = AlertRule.objects.filter(pk=rule_id).first()
    if rule is None:
        raise NotFoundError(f"alert rule {rule_id} not found")
    return rule


@require_GET
@console_view(ALERTS_PERM)
def alert_list(request: HtmxHttpRequest) -> HttpResponse:
    rules = list(AlertRule.objects.order_by("name", "id"))
    deliveries = list(
        AlertDelivery.objects.select_related("rule").order_by("-created_at", "-id")[
            :RECENT_DELIVERIES
        ]
    )
    context = {
        "rules": [(rule, masked_target(rule)) for rule in rules],
        "deliveries": deliveries,
    }
    return render(request, "operations/alerts.html", context)


@require_http_methods(["GET", "POST"])
@console_view(ALERTS_PERM)
def alert_edit(request: HtmxHttpRequest, rule_id: int | None = None) -> HttpResponse:
    rule = _alert_rule(rule_id) if rule_id is not None else AlertRule()
    form = AlertRuleForm(request.POST or None, instance=rule)
    if request.method == "POST":
        if form.is_valid():
            saved = store_rule(form.save(commit=False), actor=request.user.get_username())
            messages.success(request, f"Alert “{saved.name}” saved.")
            return redirect("operations:alerts")
        status = 400
    else:
        status = 200
    return render(
        request, "operations/alert_form.html", {"form": form, "rule": rule}, status=status
    )


@require_POST
@console_view(ALERTS_PERM)
def alert_send_test(request: HtmxHttpRequest, rule_id: int) -> HttpResponse:
    rule = _alert_rule(rule_id)
    send_test(rule, actor=request.user.get_username())
    messages.success(
        request, f"Test notice for “{rule.name}” queued; its attempts are listed below."
    )
    return redirect("operations:alert_deliveries", rule_id=rule.pk)


@require_GET
@console_view(ALERTS_PERM)
def alert_deliveries(request: HtmxHttpRequest, rule_id: int) -> HttpResponse:
    rule = _alert_rule(rule_id)
    deliveries = list(
        AlertDelivery.objects.filter(rule=rule)
        .order_by("-created_at", "-id")
        .prefetch_related("tries")[:100]
    )
    context = {"rule": rule, "target": masked_target(rule), "deliveries": deliveries}
    return render(request, "operations/alert_deliveries.html", context)
