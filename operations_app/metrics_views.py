"""``GET /metrics``: Prometheus text, for a read-scope Bearer token or an allowed network.

A token acts with the lower of its own scope and its user's current role
(``tokens.effective_scope``, the API's rule): a token whose user lost every role gets 403.

A logged-in console user with any role may read it too (the API's rule for session callers).

The network allowance reads ``REMOTE_ADDR`` only: a forwarded-for header is whatever the
client says, so it never opens the endpoint.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from opensquilla_site.auth import scope_for_user
from opensquilla_site.tokens import authenticate_token, effective_scope, scope_allows

from .metrics import CONTENT_TYPE, render_metrics

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@lru_cache(maxsize=8)
def _networks(spec: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(item, strict=False) for item in spec)


def _from_allowed_network(request: HttpRequest) -> bool:
    spec = tuple(getattr(settings, "OPENSQUILLA_METRICS_ALLOWED_NETWORKS", ()) or ())
    if not spec:
        return False
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(address in network for network in _networks(spec))


def _refuse(status: int, detail: str, code: str) -> JsonResponse:
    response = JsonResponse({"detail": detail, "code": code}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    header = request.headers.get("Authorization", "")
    if header:
        scheme, _, plaintext = header.partition(" ")
        token = authenticate_token(plaintext) if scheme.lower() == "bearer" else None
        if token is None:
            return _refuse(401, "invalid, unknown or revoked API token", "unauthorized")
        # The API's rule: a token acts with at most its user's current role.
        scope = effective_scope(token)
        if scope is None:
            return _refuse(403, "the token's user has no role that may read metrics", "forbidden")
        if not scope_allows(scope, "read"):  # pragma: no cover - every scope includes read
            return _refuse(403, "this call needs the 'read' scope", "forbidden")
    elif request.user.is_authenticated:
        # A console user with a role may open it in the browser, as with the JSON API.
        if scope_for_user(request.user) is None:
            return _refuse(403, "your account has no role that may read metrics", "forbidden")
    elif not _from_allowed_network(request):
        return _refuse(
            401, "send a read-scope API token as 'Authorization: Bearer …'", "unauthorized"
        )
    return HttpResponse(render_metrics(), content_type=CONTENT_TYPE)
