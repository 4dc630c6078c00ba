"""What the JSON API accepts as a body, enforced where the body is parsed.

Django refuses anything over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (8 MiB by default) outright;
below that, each operation has its own limit: 2 MiB by default, raised with ``body_limit``
for the bulk upsert. A non-empty body must say it is JSON (``application/json`` or a
``+json`` type: 415 otherwise), and may nest at most ``MAX_JSON_DEPTH`` levels (422).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest
from ninja.parser import Parser

from .schemas import json_depth_problem

DEFAULT_MAX_BODY_BYTES = 2 * 1024 * 1024
BULK_MAX_BODY_BYTES = 8 * 1024 * 1024


class UnsupportedMediaType(Exception):
    def __init__(self, content_type: str) -> None:
        super().__init__(
            f"the body must be sent as Content-Type: application/json; got {content_type!r}"
        )


class JsonTooDeep(Exception):
    """A body nested beyond what any call needs (or than the JSON decoder can recurse)."""


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
        if body and not _is_json(request.content_type or ""):
            raise UnsupportedMediaType(request.content_type or "")
        try:
            data = json.loads(body)
        except RecursionError as exc:
            raise JsonTooDeep("JSON is nested too deeply to read") from exc
        problem = json_depth_problem(data)
        if problem:
            raise JsonTooDeep(problem)
        return data


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )
