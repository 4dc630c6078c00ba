"""``Idempotency-Key`` support for the API's acting POSTs.

The first call with a key stores its response; a retry with the same key (from the same
token or console user) gets that response back and does no work. A key is reserved before
the work starts, so two concurrent retries cannot both run it: the second gets 409 until the
first finishes. Errors are not stored: a call that failed did no work, so a retry may run.
A key names one request: the same key on another method, path, query or body is a 422
``idempotency_key_reused``, never the first call's answer to a different question.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from django.db import IntegrityError, transaction
from django.http import HttpRequest
from ninja import Status
from pydantic import BaseModel

from .exceptions import ConflictError, ValidationFailed
from .models import IdempotentRequest
from .serving import ABANDONED_REQUEST_SECONDS
from .timeutil import now_ms

HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 255
IN_PROGRESS = 0
# A reservation older than the server's request timeout belongs to a request the server has
# killed (or a process that died): the key is freed. See opensquilla_site/serving.py.
ABANDONED_AFTER_MS = ABANDONED_REQUEST_SECONDS * 1000


class IdempotencyKeyReused(ValidationFailed):
    code = "idempotency_key_reused"


class IdempotencyInProgress(ConflictError):
    code = "idempotency_in_progress"


def _jsonable(body: Any) -> Any:
    if isinstance(body, BaseModel):
        return body.model_dump(mode="json")
    if isinstance(body, list):
        return [_jsonable(item) for item in body]
    return body


def _key_from(request: HttpRequest) -> str | None:
    raw = request.headers.get(HEADER)
    if raw is None:
        return None
    key = raw.strip()
    if not key or len(key) > MAX_KEY_LENGTH or not key.isprintable():
        raise ValidationFailed(
            f"{HEADER} must be 1 to {MAX_KEY_LENGTH} printable characters",
            extra={"header": HEADER},
        )
    return key


def _request_digest(request: HttpRequest) -> str:
    """The query and body of the call; JSON bodies canonicalised so key order does not count."""
    body = request.body
    try:
        canonical = json.dumps(json.loads(body), sort_keys=True, separators=(",", ":")).encode()
    except ValueError:
        canonical = body
    query = "&".join(sorted(request.META.get("QUERY_STRING", "").split("&")))
    return hashlib.sha256(query.encode() + b"\n" + canonical).hexdigest()


def _reserve(owner: str, key: str, method: str, path: str, digest: str) -> IdempotentRequest | None:
    """Reserve the key; returns None when it is already taken."""
    try:
        with transaction.atomic():
            return IdempotentRequest.objects.create(
                key=key,
                token_digest=owner,
                method=method,
                path=path,
                request_digest=digest,
                status_code=IN_PROGRESS,
                response_body={},
            )
    except IntegrityError:
        return None


def run_idempotent(
    request: HttpRequest, *, owner: str, action: Callable[[], Status[Any]]
) -> Status[Any]:
    """Run ``action`` (returning a ninja ``Status``) at most once per Idempotency-Key.

    Without the header the action simply runs. Raises ``IdempotencyKeyReused`` (422) when the
    key was first used on another method or path, ``IdempotencyInProgress`` (409) while the
    first call with the key is still running.
    """
    key = _key_from(request)
    if key is None:
        return action()
    method, path = request.method or "", request.path
    digest = _request_digest(request)
    reservation = _reserve(owner, key, method, path, digest)
    if reservation is None:
        stored = IdempotentRequest.objects.filter(token_digest=owner, key=key).first()
        if stored is None:
            raise IdempotencyInProgress("a request with this Idempotency-Key is finishing; retry")
        if stored.method != method or stored.path != path:
            raise IdempotencyKeyReused(
                f"this Idempotency-Key was used for {stored.method} {stored.path}; "
                "use a new key for a different call",
                extra={"header": HEADER},
            )
        if stored.request_digest and stored.request_digest != digest:
            raise IdempotencyKeyReused(
                "this Idempotency-Key was used with a different body or query; "
                "use a new key for a different call",
                extra={"header": HEADER},
            )
        if stored.status_code != IN_PROGRESS:
            request.idempotent_replay = True  # type: ignore[attr-defined]
            return Status(stored.status_code, stored.response_body)
        if now_ms() - stored.created_at < ABANDONED_AFTER_MS:
            raise IdempotencyInProgress("a request with this Idempotency-Key is still running")
        stored.delete()
        reservation = _reserve(owner, key, method, path, digest)
        if reservation is None:
            raise IdempotencyInProgress("a request with this Idempotency-Key is still running")
    try:
        result = action()
    except BaseException:
        IdempotentRequest.objects.filter(pk=reservation.pk).delete()
        raise
    body = _jsonable(result.value)
    IdempotentRequest.objects.filter(pk=reservation.pk).update(
        status_code=result.status_code, response_body=body
    )
    return Status(result.status_code, body)
