"""Typed domain errors, translated to HTTP/HTML at the edges.

Services raise the built-ins the OpenSquilla contract names (``KeyError`` for a missing row or a
changed generation, ``ValueError`` for bad input) or one of these. Each edge (ninja handler,
HTMX view, management command) maps them once.
"""

from __future__ import annotations


class ApplicationError(Exception):
    """Base for errors an operator or client can act on. ``code`` is stable and machine-read."""

    code = "application_error"
    status = 400

    def __init__(self, message: str, *, extra: dict | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra or {}


class NotFoundError(ApplicationError):
    code = "not_found"
    status = 404


class GenerationFenceError(ApplicationError):
    """The session was reset or deleted since the caller read it."""

    code = "generation_changed"
    status = 409


class ConflictError(ApplicationError):
    code = "conflict"
    status = 409


class ValidationFailed(ApplicationError):
    code = "validation_error"
    status = 422


class PermissionDeniedError(ApplicationError):
    code = "forbidden"
    status = 403


def is_generation_fence(exc: BaseException) -> bool:
    """Upstream signals a fence with ``KeyError("Session generation changed: …")``."""
    return isinstance(exc, KeyError) and "Session generation changed" in str(exc)
