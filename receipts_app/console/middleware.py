"""The console's edge for gateways: ``?gateway=NAME`` on any console page (in the URL, like
every other filter) runs the page in that gateway (``sessions_app.gateways``): lists show
its rows only and a session key addresses its session. Without it, lists span every gateway
and a session key is ``local``'s. A name that is not a slug is a message, never a 500.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from sessions_app.gateways import GatewayNameError, using_gateway, validate_gateway_name

# "operations": the overview's time-at-risk panel (and any operations page) reads the same way.
CONSOLE_NAMESPACES = frozenset({"receipts", "sessions", "operations"})


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
            context = {"title": "Something needs fixing", "message": str(exc), "fields": {}}
            return render(request, "console/error.html", context, status=400)
        with using_gateway(name):
            return view(request, *args, **kwargs)
