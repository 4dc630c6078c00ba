"""Request body limits of the JSON API, enforced where the body is parsed.

Django refuses anything over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (8 MiB by default) outright;
below that, each operation has its own limit: 2 MiB by default, raised with ``body_limit``
for the bulk upsert.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest
from ninja.parser import Parser

DEFAULT_MAX_BODY_BYTES = 2 * 1024 * 1024
BULK_MAX_BODY_BYTES = 8 * 1024 * 1024


class RequestBodyTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"request body is larger than {limit} bytes")
        self.limit = limit


def body_limit(limit: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A ``decorate_view`` decorator that sets the operation's body limit before parsing."""

    def decorator(run: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(run)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            request.max_body_bytes = limit  # type: ignore[attr-defined]
            return run(request, *args, **kwargs)

        return wrapper

    return decorator


class LimitedJsonParser(Parser):
    def parse_body(self, request: HttpRequest) -> Any:
        limit = getattr(request, "max_body_bytes", DEFAULT_MAX_BODY_BYTES)
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0
        if declared > limit:
            raise RequestBodyTooLarge(limit)
        body = request.body
        if len(body) > limit:
            raise RequestBodyTooLarge(limit)
        return json.loads(body)
