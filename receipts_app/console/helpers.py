"""Shared edges of the console views: login, role checks, actors and friendly errors.

Every console view checks its permission here, in Python, so a fragment requested directly
(without the page around it) is refused the same way as the page.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template import TemplateDoesNotExist
from django.template.loader import get_template, render_to_string
from django_htmx.http import HttpResponseClientRedirect
from django_htmx.middleware import HtmxDetails

from opensquilla_site.exceptions import ApplicationError

from ..audit import Actor

VIEW_PERM = "receipts_app.view_memorydurablereceipt"
VIEW_EVENTS_PERM = "receipts_app.view_receiptevent"
VIEW_PLANS_PERM = "receipts_app.view_requeueplan"
VIEW_SESSIONS_PERM = "sessions_app.view_session"
OPERATE_PERM = "receipts_app.operate_receipts"
# The event the page listens for to refresh counts, tables and timelines after an action.
CHANGED_EVENT = "receipts-changed"

View = Callable[..., HttpResponse]


class HtmxHttpRequest(HttpRequest):
    """The request type of every console view (django-htmx's middleware sets ``htmx``)."""

    htmx: HtmxDetails


def can_operate(user: Any) -> bool:
    return bool(user.is_authenticated and user.has_perm(OPERATE_PERM))


def shown_to(user: Any, value: Any, for_viewer: Callable[[Any], Any]) -> Any:
    """``value`` as ``user`` may read it: operators and admins whole, a viewer through
    ``for_viewer`` (no hosts, node names, paths or raw errors: receipts_app/mirror/exposure.py,
    operations_app/exposure.py). The API's ``read`` scope follows the same rule."""
    return value if can_operate(user) else for_viewer(value)


def console_role(user: Any) -> str:
    """The role the header shows: what the user may do here, highest first."""
    if not user.is_authenticated:
        return ""
    if user.is_superuser or (user.is_staff and user.has_perm(OPERATE_PERM)):
        return "admin"
    if user.has_perm(OPERATE_PERM):
        return "operator"
    return "viewer"


def console_actor(request: HtmxHttpRequest) -> Actor:
    return Actor(name=request.user.get_username(), surface="console")


def render_page(
    request: HtmxHttpRequest, template: str, context: dict[str, Any], *, status: int = 200
) -> HttpResponse:
    """The page, or only the fragment an htmx request asked for.

    Page templates name their swappable fragments with ``{% partialdef <element-id> %}``
    (django-template-partials), and an htmx request says which element it swaps (the
    ``HX-Target`` id). When the page defines a partial of that name only it is rendered;
    anything else (no htmx, no target, a target the page does not define) gets the page.
    So no view compares target ids by hand, and a forged header can only pick one of the
    page's own fragments.
    """
    name = template
    target = request.htmx.target if getattr(request, "htmx", False) else None
    if target:
        try:
            get_template(f"{template}#{target}")
        except TemplateDoesNotExist:
            pass
        else:
            name = f"{template}#{target}"
    return render(request, name, context, status=status)


PANEL_PAGE = "console/panel_page.html"


def render_panel(
    request: HtmxHttpRequest,
    template: str,
    context: dict[str, Any],
    *,
    title: str,
    empty_text: str,
) -> HttpResponse:
    """A panel a page loads after it renders: for htmx the fragment alone; opened at its own
    URL (a bookmark, a link copied from the browser's network tab), the panel inside the
    console's page, so it has the header and the styles (a bare fragment is an unstyled table
    wider than a phone), and a panel with nothing to show says so instead of a blank page."""
    if getattr(request, "htmx", False):
        return render(request, template, context)
    panel = render_to_string(template, context, request=request)
    return render(
        request,
        PANEL_PAGE,
        {"title": title, "panel": panel, "empty": not panel.strip(), "empty_text": empty_text},
    )


def render_fragment(
    request: HtmxHttpRequest,
    template: str,
    partial: str,
    context: dict[str, Any],
    *,
    status: int = 200,
) -> HttpResponse:
    """One named fragment of a page (what an action re-renders after it ran)."""
    return render(request, f"{template}#{partial}", context, status=status)


# The longest operator note an action keeps (the audit event's reason).
NOTE_MAX_CHARS = 2000


def operator_note(request: HtmxHttpRequest, field: str = "reason") -> str:
    """The operator's optional note on an action, as the timeline and audit log show it."""
    return request.POST.get(field, "").strip()[:NOTE_MAX_CHARS]


def outcome_text(outcome: object, message: str) -> str:
    """ "stale: status is now …", never "stale: stale: …": the services' messages often
    start with their outcome already."""
    label = str(outcome)
    if message.lower().startswith(label.replace("_", " ")) or message.startswith(label):
        return message
    return f"{label}: {message}" if message else label


def render_error(
    request: HtmxHttpRequest,
    message: str,
    *,
    status: int,
    fields: dict[str, str] | None = None,
    title: str = "Something needs fixing",
) -> HttpResponse:
    """The message as a page, or as a fragment swapped into the page's message area."""
    context = {"title": title, "message": message, "fields": fields or {}}
    if getattr(request, "htmx", False):
        response = render(request, "console/_message.html", context, status=status)
        response["HX-Retarget"] = "#messages"
        response["HX-Reswap"] = "innerHTML"
        return response
    return render(request, "console/error.html", context, status=status)


def render_application_error(request: HtmxHttpRequest, exc: ApplicationError) -> HttpResponse:
    fields = exc.extra.get("fields") if isinstance(exc.extra, dict) else None
    status = 400 if exc.status == 422 else exc.status
    return render_error(request, exc.message, status=status, fields=fields)


def _login_response(request: HtmxHttpRequest) -> HttpResponse:
    if getattr(request, "htmx", False):
        # A partial cannot show a login form: send the whole tab to the login page.
        return HttpResponseClientRedirect(
            f"{settings.LOGIN_URL}?next={request.htmx.current_url_abs_path or '/'}"  # type: ignore[attr-defined]
        )
    return redirect_to_login(request.get_full_path(), settings.LOGIN_URL)


def console_view(*perms: str) -> Callable[[View], View]:
    """Require a login and every permission in ``perms``; refuse with a friendly 403.

    Application errors escaping the view become a message with their status, never a 500.
    """

    def decorator(view: View) -> View:
        @wraps(view)
        def wrapper(request: HtmxHttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return _login_response(request)
            missing = [p for p in perms if not request.user.has_perm(p)]
            if missing:
                return render_error(
                    request,
                    "Your role does not allow this. Ask an administrator for operator access.",
                    status=403,
                    title="Not allowed",
                )
            try:
                return view(request, *args, **kwargs)
            except ApplicationError as exc:
                return render_application_error(request, exc)

        return wrapper

    return decorator


def int_param(request: HtmxHttpRequest, name: str, default: int, *, lo: int, hi: int) -> int:
    """A bounded integer query parameter; nonsense falls back to the default."""
    try:
        value = int(request.GET.get(name, default))
    except (TypeError, ValueError):
        return default
    return max(lo, min(hi, value))
