"""The one NinjaAPI at /api/v1/: routers, the error contract, and token administration.

Every error is JSON ``{"detail": …, "code": …}``. The handlers below are the only place where
domain errors become HTTP statuses:
- ``ApplicationError`` subclasses carry their own status and code;
- ``KeyError`` is 404 (``GenerationChanged`` is an ``ApplicationError`` first: 409);
- ``ValueError`` is 422, as is a request that fails schema validation;
- a write refused by a unique constraint is 409;
- unparseable JSON is 400, a body over the limit 413 (with ``limit_bytes``), a body not sent
  as JSON 415, JSON nested too deeply 422, a missing or bad credential 401, a
  missing scope or failed CSRF check 403;
- anything else is a logged 500 that shows no stack trace.
"""

from __future__ import annotations

import logging
from typing import Any

import pydantic
from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db import IntegrityError
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI, Path, Router, Status
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError

from receipts_app.api import gateways_router, health_router, plans_router, session_receipts_router
from receipts_app.api import router as receipts_router
from sessions_app.api import router as sessions_router
from sessions_app.gateways import in_requested_gateway

from .api_docs import docs_access
from .auth import ADMIN, principal
from .exceptions import ApplicationError
from .limits import JsonTooDeep, LimitedJsonParser, RequestBodyTooLarge, UnsupportedMediaType
from .models import ApiToken
from .schemas import (
    AUTH_ERRORS,
    WRITE_ERRORS,
    TokenCreatedOut,
    TokenIn,
    TokenListOut,
    TokenOut,
    errors,
)
from .tokens import create_api_token, revoke_api_token

logger = logging.getLogger("opensquilla_site.api")

api = NinjaAPI(
    title="opensquilla-site",
    version="1",
    description=(
        "Durable memory receipt ledger. Authenticate with `Authorization: Bearer osq_…` "
        "(scopes read < operate < admin) or the console's session cookie plus CSRF token. "
        "Errors are always `{detail, code}`. See docs/API.md."
    ),
    urls_namespace="api",
    docs_url="/docs",
    docs_decorator=docs_access,
    parser=LimitedJsonParser(),
)


def _error(
    request: HttpRequest, status: int, detail: Any, code: str, extra: dict[str, Any] | None = None
) -> HttpResponse:
    body = {**(extra or {}), "detail": detail, "code": code}
    return api.create_response(request, body, status=status)


@api.exception_handler(ApplicationError)
def _application_error(request: HttpRequest, exc: ApplicationError) -> HttpResponse:
    return _error(request, exc.status, exc.message, exc.code, exc.extra)


@api.exception_handler(KeyError)
def _key_error(request: HttpRequest, exc: KeyError) -> HttpResponse:
    message = str(exc.args[0]) if exc.args else "not found"
    return _error(request, 404, message, "not_found")


@api.exception_handler(ValueError)
def _value_error(request: HttpRequest, exc: ValueError) -> HttpResponse:
    if isinstance(exc, pydantic.ValidationError):
        # Input is validated by ninja (NinjaValidationError); a pydantic error here means a
        # response did not fit its own schema, which is our bug, not the caller's.
        return _internal_error(request, exc)
    return _error(request, 422, str(exc), "validation_error")


@api.exception_handler(NinjaValidationError)
def _validation_error(request: HttpRequest, exc: NinjaValidationError) -> HttpResponse:
    return _error(request, 422, exc.errors, "validation_error")


@api.exception_handler(RequestDataTooBig)
def _too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return _error(
        request, 413, "request body is too large", "payload_too_large", {"limit_bytes": limit}
    )


@api.exception_handler(RequestBodyTooLarge)
def _too_large(request: HttpRequest, exc: RequestBodyTooLarge) -> HttpResponse:
    return _error(request, 413, str(exc), "payload_too_large", {"limit_bytes": exc.limit})


_HTTP_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found"}


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    cause = exc.__cause__
    # ninja wraps every body-parser failure in a 400; the size limits are raised there too.
    if isinstance(cause, RequestBodyTooLarge):
        return _too_large(request, cause)
    if isinstance(cause, RequestDataTooBig):
        return _too_big(request, cause)
    if isinstance(cause, UnsupportedMediaType):
        return _error(request, 415, str(cause), "unsupported_media_type")
    if isinstance(cause, JsonTooDeep):
        return _error(request, 422, str(cause), "validation_error")
    if exc.status_code == 400 and cause is not None:
        return _error(request, 400, "request body is not valid JSON", "invalid_json")
    if isinstance(exc, AuthenticationError):
        message = exc.message if exc.message != "Unauthorized" else "authentication required"
        return _error(request, 401, message, "unauthorized")
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    return _error(request, exc.status_code, exc.message, code)


@api.exception_handler(Http404)
def _not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return _error(request, 404, "not found", "not_found")


@api.exception_handler(IntegrityError)
def _integrity_error(request: HttpRequest, exc: IntegrityError) -> HttpResponse:
    # A unique constraint (say, another row's idempotency_key) refused the write.
    logger.info("API %s %s hit a constraint: %s", request.method, request.path, exc)
    return _error(request, 409, "the change conflicts with an existing row", "conflict")


@api.exception_handler(PermissionDenied)
def _permission_denied(request: HttpRequest, exc: PermissionDenied) -> HttpResponse:
    return _error(request, 403, str(exc) or "permission denied", "forbidden")


@api.exception_handler(Exception)
def _internal_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    logger.exception("API %s %s failed", request.method, request.path, exc_info=exc)
    return _error(request, 500, "internal error", "internal_error")


# --- token administration (admin scope) ------------------------------------------------------

tokens_router = Router(tags=["tokens"], auth=ADMIN)


@tokens_router.get(
    "", response={200: TokenListOut, **errors(*AUTH_ERRORS)}, operation_id="list_api_tokens"
)
def list_api_tokens(request: HttpRequest) -> dict[str, Any]:
    return {"items": list(ApiToken.objects.select_related("user").order_by("-created_at", "-id"))}


@tokens_router.post(
    "",
    response={201: TokenCreatedOut, **errors(*WRITE_ERRORS)},
    operation_id="create_api_token",
)
def create_token(request: HttpRequest, payload: TokenIn) -> Status[Any]:
    """Create a token for the calling user. Deliberately not replayable with an
    Idempotency-Key: a stored replay would keep the plaintext secret in the database."""
    token, plaintext = create_api_token(
        user=principal(request).user, name=payload.name, scope=payload.scope
    )
    return Status(201, {**TokenOut.from_orm(token).model_dump(), "token": plaintext})


@tokens_router.delete(
    "/{token_id}",
    response={200: TokenOut, **errors(*AUTH_ERRORS, 404, 422)},
    operation_id="revoke_api_token",
)
def revoke_token(request: HttpRequest, token_id: int = Path(..., ge=1, le=2**63 - 1)) -> ApiToken:
    return revoke_api_token(token_id=token_id)


# Each router under its own prefix. Order matters within /sessions: the receipt-backed
# session routes (…/checkpoints, …/flush, …/coverage) must be matched before the sessions
# router's catch-all ``sessions/{path:key}``.
# ``?gateway=NAME`` on every receipts, sessions, health and gateways route: lists span every
# gateway without it, a session key addresses ``local`` (sessions_app.gateways).
for _router in (
    session_receipts_router,
    sessions_router,
    receipts_router,
    health_router,
    gateways_router,
):
    _router.add_decorator(in_requested_gateway)
api.add_router("/sessions", session_receipts_router)
api.add_router("/sessions", sessions_router)
api.add_router("/receipts", receipts_router)
api.add_router("/requeue-plans", plans_router)
api.add_router("/health", health_router)
api.add_router("/gateways", gateways_router)
api.add_router("/tokens", tokens_router)
