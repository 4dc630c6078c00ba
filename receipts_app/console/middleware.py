"""The console's edge for gateways: ``?gateway=NAME`` on any console page (in the URL, like
every other filter) runs the page in that gateway (``sessions_app.gateways``): lists show
its rows only and a session key addresses its session. Without it, lists span every gateway
and a session key is ``local``'s. A name that is not a slug, or names no gateway, is a
message, never a 500 (and never an empty list that looks like "nothing here").

The names of every gateway are read once per request here (one query) and kept on the
request for the pages' gateway select (:func:`console_gateways`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.http import HttpRequest, HttpResponse

from sessions_app.gateways import (
    Gateway,
    GatewayNameError,
    gateway_scope,
    using_gateway,
    validate_gateway_name,
)

from ..counts import CountRow
from .helpers import render_error

# "operations": the overview's time-at-risk panel (and any operations page) reads the same way.
CONSOLE_NAMESPACES = frozenset({"receipts", "sessions", "operations", "agents"})
# The lists, where a gateway that does not exist would read as "nothing here": the middleware
# checks the name first (one query, whose names the gateway select reuses). A page that
# addresses one row (a receipt, a session, a plan) says "not found" on its own, the overview
# checks from the counts it reads anyway (:func:`unknown_gateway`) and the fleet view from the
# gateways it lists (:func:`gateway_not_found`), so none of them pays a query for it.
CHECKED_VIEWS = frozenset(
    {
        "receipts:list",
        "receipts:plans",
        "receipts:audit",
        "sessions:list",
    }
)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_NAMES_ATTR = "_console_gateway_names"
# A message lists at most this many known names.
_NAMES_SHOWN = 20


def gateway_not_found(request: HttpRequest, name: str, names: list[str]) -> HttpResponse:
    """The page for ``?gateway=name`` naming none of ``names`` (every gateway's name)."""
    return _not_found(request, name, names)


def _not_found(request: HttpRequest, name: str, names: list[str]) -> HttpResponse:
    shown = ", ".join(names[:_NAMES_SHOWN]) + (" …" if len(names) > _NAMES_SHOWN else "")
    return render_error(
        request,  # type: ignore[arg-type]
        f"No gateway is named {name!r}. The console holds: {shown}. "
        "Pick one from the gateway filter, or remove gateway= from the address.",
        status=404,
        title="Gateway not found",
    )


def unknown_gateway(request: HttpRequest, rows: Iterable[CountRow]) -> HttpResponse | None:
    """The message for a page scoped to a gateway that does not exist, else None. ``rows``:
    the counts the page read; a gateway with receipts exists, so only a gateway with none
    costs a query (and then the page has nothing else to read for it)."""
    scope = gateway_scope()
    if scope is None or any(row.gateway_id == scope for row in rows):
        return None
    names = console_gateways(request)
    return None if scope in names else _not_found(request, scope, names)


def console_gateways(request: HttpRequest | None) -> list[str]:
    """Every gateway's name, by name: read once per request (none: read now)."""
    names = getattr(request, _NAMES_ATTR, None) if request is not None else None
    if names is None:
        names = list(Gateway.objects.order_by("name").values_list("name", flat=True))
        if request is not None:
            setattr(request, _NAMES_ATTR, names)
    return names


class ConsoleGatewayMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(
        self,
        request: HttpRequest,
        view: Callable[..., HttpResponse],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> HttpResponse | None:
        match = request.resolver_match
        name = request.GET.get("gateway") or None
        if name is None or match is None or match.namespace not in CONSOLE_NAMESPACES:
            return None
        try:
            validate_gateway_name(name)
        except GatewayNameError as exc:
            return render_error(request, str(exc), status=400)  # type: ignore[arg-type]
        # Without a login the view sends the browser to the login page; nothing is said
        # about which gateways exist.
        # An action (any POST) is checked too: a refusal there must name the gateway, not say
        # "session not found" about a session that may well exist under its real gateway.
        checked = match.view_name in CHECKED_VIEWS or request.method not in SAFE_METHODS
        if request.user.is_authenticated and checked:
            names = console_gateways(request)
            if name not in names:
                return _not_found(request, name, names)
        with using_gateway(name):
            return view(request, *args, **kwargs)
