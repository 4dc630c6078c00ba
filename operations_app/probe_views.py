"""``/healthz`` (the process runs) and ``/readyz`` (it can reach the database and the broker).

Both answer without credentials and reveal no data: orchestrators call them from outside any
login. ``ProbeMiddleware`` serves them ahead of the host check, the HTTPS redirect and the
session machinery, because a kubelet probes by pod IP over plain HTTP.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache

from .probes import readiness


@never_cache
def healthz(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"status": "ok"})


@never_cache
def readyz(request: HttpRequest) -> HttpResponse:
    results = readiness()
    failed = [r.name for r in results if not r.ok]
    body = {
        "status": "ready" if not failed else "unavailable",
        "failed": failed,
        "checks": {r.name: r.to_dict() for r in results},
    }
    return JsonResponse(body, status=503 if failed else 200)


PROBES: dict[str, Callable[[HttpRequest], HttpResponse]] = {
    "/healthz": healthz,
    "/readyz": readyz,
}


class ProbeMiddleware:
    """Answer the probe paths before any other middleware runs (first in MIDDLEWARE)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        view = PROBES.get(request.path_info.rstrip("/"))
        if view is not None and request.method in ("GET", "HEAD"):
            return view(request)
        return self.get_response(request)
