"""Refuse NUL characters in the URL and in form fields before any view or query sees them.

PostgreSQL text cannot hold NUL, so a ``%00`` in a path, a query parameter or a posted form
field (a requeue reason, a plan's note, a selection) would reach the database as a DataError
(a 500). Refusing it once, here, covers every surface: the console, the admin, the login
form. JSON bodies of the API are checked by its schemas (``opensquilla_site.schemas``), which
refuse NUL in every string with a 422 naming the field.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

NUL = "\x00"
NUL_REASON = "contains a NUL character, which no identifier can hold"
FIELD_NUL_REASON = "a NUL character cannot be stored"
_FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def _items(data: object) -> list[tuple[str, str]]:
    lists = data.lists()  # type: ignore[attr-defined]
    return [(key, value) for key, values in lists for value in values]


def _bad_names(items: list[tuple[str, str]]) -> list[str]:
    bad = {key for key, value in items if NUL in key or NUL in value}
    return sorted(key.replace(NUL, "") for key in bad)


def _form_items(request: HttpRequest) -> list[tuple[str, str]]:
    """The posted form fields, or nothing when the body is no form or cannot be parsed.

    A body Django refuses (too large, too many fields) is left to Django's own answer: the
    parse state is reset so the view's access raises the same error it always did.
    """
    if request.method != "POST" or request.content_type not in _FORM_TYPES:
        return []
    try:
        return _items(request.POST)
    except Exception:  # noqa: BLE001 - any parse failure: Django reports it at the view
        for name in ("_post", "_files"):
            request.__dict__.pop(name, None)
        return []


def _refusal(request: HttpRequest, message: str, title: str) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": message, "code": "validation_error"}, status=422)
    context = {"title": title, "message": message, "fields": {}}
    if request.headers.get("HX-Request") == "true":
        # An htmx form: the message goes where the console shows messages, not into the row.
        response = render(request, "console/_message.html", context, status=400)
        response["HX-Retarget"] = "#messages"
        response["HX-Reswap"] = "innerHTML"
        return response
    return render(request, "console/error.html", context, status=400)


class RejectNulMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        in_path = NUL in request.path
        bad_params = _bad_names(_items(request.GET))
        if in_path or bad_params:
            # Name what is wrong, as the views' own validation messages do.
            subject = "The address" if in_path else f"The value of {', '.join(bad_params)}"
            title = "That address needs fixing" if in_path else "Those filters need fixing"
            return _refusal(request, f"{subject} is not valid: it {NUL_REASON}.", title)
        if request.path.startswith("/api/"):
            return self.get_response(request)
        bad_fields = _bad_names(_form_items(request))
        if bad_fields:
            subject = "field" if len(bad_fields) == 1 else "fields"
            message = f"The {subject} {', '.join(bad_fields)}: {FIELD_NUL_REASON}. Nothing changed."
            return _refusal(request, message, "That form needs fixing")
        return self.get_response(request)
