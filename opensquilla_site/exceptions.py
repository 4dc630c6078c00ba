"""Typed domain errors, translated to HTTP/HTML at the edges.

Services raise the built-ins the OpenSquilla contract names (``KeyError`` for a missing row,
``ValueError`` for bad input) or one of these. Each edge (ninja handler, HTMX view, management
command) maps them once, by type: no edge reads an error's text.
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


class GenerationChanged(ApplicationError, KeyError):
    """The session was reset or deleted since the caller read its generation (``session_id``).

    Upstream raises ``KeyError("Session generation changed: <key>")`` for this, and callers
    written against upstream catch ``KeyError``; so it is a KeyError too, with upstream's
    message. Being an ``ApplicationError`` as well, every edge maps it by type (409
    ``generation_changed``) before any plain ``KeyError`` (404) handler sees it.
    """

    code = "generation_changed"
    status = 409

    def __init__(self, session_key: str) -> None:
        super().__init__(f"Session generation changed: {session_key}")
        self.session_key = session_key

    def __str__(self) -> str:
        # KeyError would quote the message; it is a sentence, not a missing key.
        return self.message


class ConflictError(ApplicationError):
    code = "conflict"
    status = 409


class ValidationFailed(ApplicationError):
    code = "validation_error"
    status = 422


class PermissionDeniedError(ApplicationError):
    code = "forbidden"
    status = 403
