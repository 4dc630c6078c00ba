"""The checkpoint scrub in the console: the overview's "Checkpoints on disk" panel (how much of
each gateway's saved memory was verified within the full cycle) and its "Verify" buttons (the
on-demand scrub of a gateway, or of one agent)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from sessions_app.gateways import DEFAULT_GATEWAY

from ...scrub import request_scrub, verified_summary
from ..helpers import (
    OPERATE_PERM,
    VIEW_PERM,
    HtmxHttpRequest,
    can_operate,
    console_view,
    render_panel,
)


@require_GET
@console_view(VIEW_PERM)
def checkpoints_verified(request: HtmxHttpRequest) -> HttpResponse:
    """The panel, loaded after the overview renders (every gateway, or ``?gateway=``'s)."""
    context = {
        "checkpoints": list(verified_summary().values()),
        "can_operate": can_operate(request.user),
    }
    return render_panel(
        request,
        "console/_checkpoints_panel.html",
        context,
        title="Checkpoints on disk",
        empty_text="No checkpoint file has been verified on disk yet.",
    )


@require_POST
@console_view(VIEW_PERM, OPERATE_PERM)
def scrub_now(request: HtmxHttpRequest) -> HttpResponse:
    """Queue the scrub to the worker holding the gateway's files; back to the overview."""
    gateway = (request.POST.get("gateway") or DEFAULT_GATEWAY)[:64]
    agent = (request.POST.get("agent") or "")[:64] or None
    try:
        asked = request_scrub(gateway, agent, full=request.POST.get("full") == "1")
    except (KeyError, ValueError) as exc:
        messages.warning(request, str(exc.args[0] if exc.args else exc))
    else:
        who = f"agent {asked.agent} on gateway {asked.gateway}" if asked.agent else asked.gateway
        text = f"Checkpoint scrub of {who} queued (task {asked.task_id[:8]})"
        if asked.warning:
            messages.warning(request, f"{text}; {asked.warning}")
        else:
            messages.success(
                request, f"{text}: missing or damaged files turn their receipts at risk."
            )
    back = reverse("receipts:overview")
    if gateway != DEFAULT_GATEWAY:
        back += "?" + urlencode({"gateway": gateway})
    return redirect(back)
