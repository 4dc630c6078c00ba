"""Session pages: a searchable list and a detail page with the escaped transcript.

The memory panel of the detail page (checkpoints, coverage, trigger buttons) is its own view
(``session_memory``), loaded into the page by URL name.
"""

from __future__ import annotations

from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from django_htmx.http import HttpResponseClientRedirect

from opensquilla_site.exceptions import ValidationFailed
from sessions_app.selectors import get_session_or_404, page_sessions, page_transcript

from ...mirror.exposure import marks_for_viewer
from .. import selectors as cs
from ..helpers import HtmxHttpRequest, render_page, shown_to
from ..receipt_rows import spans_gateways

VIEW_PERM = "sessions_app.view_session"
TRANSCRIPT_PERM = "sessions_app.view_transcriptentry"
# Longer messages are collapsed behind a <details> toggle.
COLLAPSE_CHARS = 600


def _refuse(request: HtmxHttpRequest, perm: str) -> HttpResponse | None:
    if not request.user.is_authenticated:
        if request.htmx:
            return HttpResponseClientRedirect(f"/accounts/login/?next={request.path}")
        return redirect_to_login(request.get_full_path())
    if not request.user.has_perm(perm):
        return _message(request, "Your role does not allow this.", 403, "Not allowed")
    return None


def _message(request: HtmxHttpRequest, message: str, status: int, title: str) -> HttpResponse:
    context = {"title": title, "message": message, "fields": {}}
    if request.htmx:
        response = render(request, "console/_message.html", context, status=status)
        response["HX-Retarget"] = "#messages"
        response["HX-Reswap"] = "innerHTML"
        return response
    return render(request, "console/error.html", context, status=status)


def _bounded(request: HtmxHttpRequest, name: str, limit: int = 200) -> str | None:
    value = (request.GET.get(name) or "").strip()
    return value[:limit] or None


@require_GET
def session_list(request: HtmxHttpRequest) -> HttpResponse:
    refused = _refuse(request, VIEW_PERM)
    if refused:
        return refused
    search, agent = _bounded(request, "q", 2000), _bounded(request, "agent", 64)
    try:
        page = page_sessions(search=search, agent=agent, cursor=request.GET.get("cursor"), limit=50)
    except ValidationFailed as exc:
        return _message(request, exc.message, 400, "Something needs fixing")
    context = {
        "rows": page.rows,
        "show_gateway": spans_gateways(request, page.rows),
        "next_cursor": page.next_cursor,
        "q": search or "",
        "agent": agent or "",
    }
    return render_page(request, "console/sessions.html", context)


@require_GET
def session_detail(request: HtmxHttpRequest, session_key: str) -> HttpResponse:
    refused = _refuse(request, VIEW_PERM) or _refuse(request, TRANSCRIPT_PERM)
    if refused:
        return refused
    try:
        session = get_session_or_404(session_key[:4000])
    except KeyError:
        return _message(request, "No session has that key.", 404, "Session not found")
    try:
        page = page_transcript(session.session_id, cursor=request.GET.get("cursor"), limit=100)
    except ValidationFailed as exc:
        return _message(request, exc.message, 400, "Something needs fixing")
    context = {
        "session": session,
        "entries": page.rows,
        "next_cursor": page.next_cursor,
        "collapse_chars": COLLAPSE_CHARS,
        "upstream_marks": shown_to(
            request.user, cs.upstream_marks_for_session(session), marks_for_viewer
        ),
    }
    return render_page(request, "console/session_detail.html", context)
