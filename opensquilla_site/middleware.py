"""Refuse NUL characters in the URL before any view or query sees them.

PostgreSQL text cannot hold NUL, so a ``%00`` in a path or query parameter would reach the
database as a DataError (a 500). Refusing it once, here, covers every surface.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

NUL_REASON = "contains a NUL character, which no identifier can hold"


def _query_items(request: HttpRequest) -> list[tuple[str, str]]:
    return [(key, value) for key, values in request.GET.lists() for value in values]


class RejectNulMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        in_path = "\x00" in request.path
        bad_params = sorted(
            {key for key, value in _query_items(request) if "\x00" in key or "\x00" in value}
        )
        if not (in_path or bad_params):
            return self.get_response(request)
        # Name what is wrong, as the views' own validation messages do.
        names = ", ".join(k.replace("\x00", "") for k in bad_params)
        subject = "The address" if in_path else f"The value of {names}"
        message = f"{subject} is not valid: it {NUL_REASON}."
        if request.path.startswith("/api/"):
            return JsonResponse({"detail": message, "code": "validation_error"}, status=422)
        title = "That address needs fixing" if in_path else "Those filters need fixing"
        context = {"title": title, "message": message, "fields": {}}
        return render(request, "console/error.html", context, status=400)
