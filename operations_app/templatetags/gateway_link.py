"""``{% load gateway_link %}{% gateway_link_panel %}``: the gateways' own memory verdicts
beside ours (operations_app/gateway_link/views.py), from the stored readings only."""

from __future__ import annotations

from typing import Any

from django import template

from operations_app.gateway_link.views import agent_link_views
from receipts_app.console.helpers import console_role

register = template.Library()


@register.inclusion_tag("console/_gateway_link_panel.html", takes_context=True)
def gateway_link_panel(context: template.Context, agent: str | None = None) -> dict[str, Any]:
    request = context.get("request")
    user = getattr(request, "user", None)
    return {
        "rows": agent_link_views(agent or None),
        "agent_page": agent is not None,
        "is_admin": user is not None and console_role(user) == "admin",
        "csrf_token": context.get("csrf_token"),
        "request": request,
    }
