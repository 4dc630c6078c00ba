"""The session memory panel: its checkpoints, exact coverage, and the trigger buttons.

It lives in receipts_app because ``sessions_app`` must never import ``receipts_app``; the
session page loads this panel by URL name.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import trigger_client_event

from sessions_app.models import Session
from sessions_app.selectors import get_session_or_404

from ...selectors import current_checkpoint_coverage
from ...services import queue_checkpoint, queue_flush, queued_work_warning
from .. import selectors as cs
from ..helpers import (
    CHANGED_EVENT,
    OPERATE_PERM,
    VIEW_PERM,
    VIEW_SESSIONS_PERM,
    HtmxHttpRequest,
    can_operate,
    console_actor,
    console_view,
    render_error,
    render_fragment,
)

PAGE_TEMPLATE = "console/session_memory.html"


def _session(request: HtmxHttpRequest, key: str) -> Session | HttpResponse:
    try:
        return get_session_or_404(key[:4000])
    except KeyError:
        return render_error(
            request, "No session has that key.", status=404, title="Session not found"
        )


def _panel(request: HtmxHttpRequest, session: Session, **extra: object) -> HttpResponse:
    covered_by, entry_count = current_checkpoint_coverage(session)
    context = {
        "session": session,
        "version": cs.session_memory_version(session),
        "checkpoints": cs.session_checkpoints(session.session_key),
        "covered_by": covered_by,
        "entry_count": entry_count,
        "can_operate": can_operate(request.user),
        **extra,
    }
    if request.htmx:
        return render_fragment(request, PAGE_TEMPLATE, "session-memory", context)
    return render(request, PAGE_TEMPLATE, context)


@require_GET
@console_view(VIEW_PERM, VIEW_SESSIONS_PERM)
def session_memory(request: HtmxHttpRequest) -> HttpResponse:
    session = _session(request, request.GET.get("key", ""))
    if isinstance(session, HttpResponse):
        return session
    seen = request.GET.get("v")
    if request.htmx and seen and seen == cs.session_memory_version(session):
        # The poller's cheap question "has anything moved?": no, so nothing to swap.
        return HttpResponse(status=204)
    return _panel(request, session)


def _trigger(request: HtmxHttpRequest, kind: str) -> HttpResponse:
    session = _session(request, request.POST.get("key", ""))
    if isinstance(session, HttpResponse):
        return session
    enqueue = queue_checkpoint if kind == "checkpoint" else queue_flush
    try:
        task_id = enqueue(session_key=session.session_key, actor=console_actor(request))
    except (KeyError, ValueError) as exc:
        message, ok = (exc.args[0] if exc.args else str(exc)), False
    else:
        message, ok = f"{kind} queued (task {task_id[:8]})", True
        warning = queued_work_warning()
        if warning:
            message, ok = f"{message}; {warning}", False
    if not request.htmx:
        (messages.success if ok else messages.warning)(request, message)
        where = "" if session.gateway_id == "local" else f"?gateway={session.gateway_id}"
        return redirect(reverse("sessions:detail", args=[session.session_key]) + where)
    response = _panel(request, session, flash=message, flash_ok=ok)
    return trigger_client_event(response, CHANGED_EVENT, {"session_key": session.session_key})


@require_POST
@console_view(VIEW_PERM, OPERATE_PERM)
def session_checkpoint_now(request: HtmxHttpRequest) -> HttpResponse:
    return _trigger(request, "checkpoint")


@require_POST
@console_view(VIEW_PERM, OPERATE_PERM)
def session_flush_now(request: HtmxHttpRequest) -> HttpResponse:
    return _trigger(request, "flush")
