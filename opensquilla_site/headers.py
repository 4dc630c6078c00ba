"""Response headers every dynamic answer carries.

``PrivateNoStoreMiddleware``: pages and API answers show ledger data or carry a CSRF token,
so no shared cache (proxy, CDN) may keep them and the browser may not store them on disk
(``Cache-Control: private, no-store``). Static files are answered by WhiteNoise before this
runs and keep their long-lived caching.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.utils.cache import patch_cache_control


class PrivateNoStoreMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        patch_cache_control(response, private=True, no_store=True)
        return response
