"""The HTTP edge of the console: a refusal Django answers with an empty body gets a page.

Django's method checks (``require_POST``, ``require_GET``, a class view's
``http_method_not_allowed``) answer a wrong method with a bare 405 and no body: a person who
followed an old link, or re-sent a form as GET, saw a blank page. ``ConsoleErrorPagesMiddleware``
gives such an answer the console's error page (or, for an htmx request, the message partial
in the page's message area), keeping the status and the ``Allow`` header. The API has its own
edge (``api_http.ApiJsonErrorsMiddleware``: JSON); the Django admin keeps Django's answers.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

OWN_EDGES = ("/api/", "/admin/", "/metrics")


def _allowed(response: HttpResponse) -> list[str]:
    return [m.strip() for m in response.get("Allow", "").split(",") if m.strip()]


def method_refusal(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """The page (or htmx message) for a 405 that came back empty."""
    allowed = _allowed(response)
    use = f"use {' or '.join(allowed)}" if allowed else "it takes no requests of this kind"
    context = {
        "title": "That request is not accepted here",
        "message": f"This address does not accept {request.method}: {use}.",
        "fields": {},
    }
    if request.headers.get("HX-Request") == "true":
        page = render(request, "console/_message.html", context, status=405)
        page["HX-Retarget"] = "#messages"
        page["HX-Reswap"] = "innerHTML"
    else:
        page = render(request, "console/error.html", context, status=405)
    for header, value in response.items():
        if header.lower() not in ("content-type", "content-length"):
            page[header] = value
    page.cookies = response.cookies
    return page


class ConsoleErrorPagesMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            response.status_code != 405
            or request.path.startswith(OWN_EDGES)
            or getattr(response, "streaming", False)
            or response.content
        ):
            return response
        return method_refusal(request, response)
