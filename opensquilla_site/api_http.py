"""The HTTP edge of ``/api/``: answers that never reach a ninja operation keep the contract.

Django and ninja answer some requests before any API handler runs: a method the route does not
have (405), a CSRF refusal (403), a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` read outside the
parser. ``ApiJsonErrorsMiddleware`` rewrites any such non-JSON error under ``/api/`` into the
API's ``{"detail", "code"}`` body, keeping the status and headers (``Allow`` on a 405).

``ChunkedBodyMiddleware`` reads a ``Transfer-Encoding: chunked`` body (no ``Content-Length``):
Django treats a request without a length as empty, which would make a chunked upsert a
misleading "field required" 422. The body is read up to the site limit (413 past it).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable

from django.conf import settings
from django.core.handlers.wsgi import LimitedStream
from django.http import HttpRequest, HttpResponse, JsonResponse

API_PREFIX = "/api/"
CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    411: "length_required",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "too_many_requests",
}
CSRF_DETAIL = "CSRF check failed: send the X-CSRFToken header with the csrftoken cookie"


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


def _is_json(response: HttpResponse) -> bool:
    return response.get("Content-Type", "").startswith("application/json")


def _detail(request: HttpRequest, response: HttpResponse) -> tuple[str, dict[str, object]]:
    status = response.status_code
    if status == 405:
        allowed = [m.strip() for m in response.get("Allow", "").split(",") if m.strip()]
        text = f"{request.method} is not allowed here; use {', '.join(allowed) or 'another URL'}"
        return text, {"allowed_methods": allowed}
    if status == 403 and getattr(request, "csrf_processing_done", False) is False:
        return CSRF_DETAIL, {}
    if status == 413:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return "request body is too large", {"limit_bytes": limit}
    return getattr(response, "reason_phrase", "") or "request refused", {}


class ApiJsonErrorsMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if not _is_api(request) or response.status_code < 400 or _is_json(response):
            return response
        detail, extra = _detail(request, response)
        code = CODES.get(response.status_code, "http_error")
        if response.status_code == 403 and detail == CSRF_DETAIL:
            code = "csrf_failed"
        rewritten = JsonResponse({**extra, "detail": detail, "code": code})
        rewritten.status_code = response.status_code
        # Every header but the body's own (Allow on a 405, Retry-After, the cache rule, …).
        for header, value in response.items():
            if header.lower() not in ("content-type", "content-length"):
                rewritten[header] = value
        rewritten.cookies = response.cookies
        return rewritten


def _chunked_without_length(request: HttpRequest) -> bool:
    encoding = request.META.get("HTTP_TRANSFER_ENCODING", "").lower()
    return "chunked" in encoding and not request.META.get("CONTENT_LENGTH")


class ChunkedBodyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if _is_api(request) and _chunked_without_length(request):
            limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            # The server (gunicorn) de-chunks wsgi.input; read one byte past the limit to know.
            body = request.META["wsgi.input"].read(limit + 1)
            if len(body) > limit:
                detail = "request body is too large"
                payload = {"limit_bytes": limit, "detail": detail, "code": "payload_too_large"}
                return HttpResponse(
                    json.dumps(payload), status=413, content_type="application/json"
                )
            request.META["CONTENT_LENGTH"] = str(len(body))
            request._stream = LimitedStream(io.BytesIO(body), len(body))  # type: ignore[assignment]
            request._read_started = False  # type: ignore[attr-defined]
        return self.get_response(request)
