"""Who may read the API's docs page and OpenAPI schema.

They hold no ledger data, but they map every operation, so in production only a logged-in
console user or a caller with a valid token sees them (``OPENSQUILLA_PUBLIC_API_DOCS``, on by
default outside production). Anonymous callers get the API's JSON 401 for the schema and the
login page for the docs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, JsonResponse

from .tokens import authenticate_token, effective_scope


def _has_valid_token(request: HttpRequest) -> bool:
    scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    token = authenticate_token(credential)
    # A token whose user lost every role opens nothing, here as at the API.
    return token is not None and effective_scope(token) is not None


def docs_access(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if settings.OPENSQUILLA_PUBLIC_API_DOCS:
            return view(request, *args, **kwargs)
        if getattr(request, "user", None) and request.user.is_authenticated:
            return view(request, *args, **kwargs)
        if _has_valid_token(request):
            return view(request, *args, **kwargs)
        if request.path.endswith(".json"):
            body = {"detail": "the API schema needs a login or a token", "code": "unauthorized"}
            return JsonResponse(body, status=401)
        return redirect_to_login(request.get_full_path())

    return wrapper
