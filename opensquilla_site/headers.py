"""The headers every answer carries, whichever middleware or view produced it.

``SecurityHeadersMiddleware`` is the outermost middleware, so it sees every response: the
probes (``/healthz``, ``/readyz``, answered before the host check), the NUL refusals, the API's
rewritten errors, static files, 404 and 500 pages. It gives each one the same security headers
the pages carry, by running the response side of the middlewares that own them (each only
adds a header that is not there yet):
- Django's ``SecurityMiddleware``: ``X-Content-Type-Options``, ``Referrer-Policy``,
  ``Cross-Origin-Opener-Policy`` (and HSTS on HTTPS in production);
- ``XFrameOptionsMiddleware``: ``X-Frame-Options``;
- django-csp's ``CSPMiddleware``: ``Content-Security-Policy``;
- ``Cache-Control: private, no-store`` on everything but static files: pages and API answers
  show ledger data or carry a CSRF token, so no shared cache (proxy, CDN) may keep them and
  the browser may not store them on disk. Static files keep WhiteNoise's long-lived caching.
"""

from __future__ import annotations

from collections.abc import Callable

from csp.middleware import CSPMiddleware
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.security import SecurityMiddleware
from django.utils.cache import patch_cache_control


class SecurityHeadersMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        # Only their response side runs here; each still runs in its place in MIDDLEWARE too
        # (the HTTPS redirect, the CSP nonce for templates).
        self._owners = (
            SecurityMiddleware(get_response),
            XFrameOptionsMiddleware(get_response),
            CSPMiddleware(get_response),
        )

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        for owner in self._owners:
            response = owner.process_response(request, response)  # type: ignore[arg-type,assignment]
        if not request.path.startswith(settings.STATIC_URL or "/static/"):
            patch_cache_control(response, private=True, no_store=True)
        return response
