"""Schema pieces shared by every router: the error body and safe input types.

Every text input rejects NUL characters and unpaired surrogates, and every number is bounded
to what the column holds: PostgreSQL cannot store either character, and SQLite cannot store
an integer past 64 bits, so such input must be a 422 here, never a 500 at the database.
Identifiers (keys, ids, scopes, statuses) also reject control characters
(``opensquilla_site.identifiers``).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from django.urls import register_converter
from ninja import Schema
from pydantic import AfterValidator, Field

from .identifiers import IDEMPOTENCY_KEY_MAX, control_character_problem

INT32_MAX = 2**31 - 1
MS_MAX = 10**15  # the ledger's "a time past this is a typo" bound (receipts_app.selectors)


def clean_text(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("must be valid Unicode text") from exc
    return value


def clean_identifier(value: str) -> str:
    """Text that names a row (a key, an id, a scope, a status): no control characters."""
    value = clean_text(value)
    problem = control_character_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def clean_session_key(value: str) -> str:
    """A session key: surrounding whitespace is dropped by canonicalisation (as upstream does),
    so only what stays, the key itself, must be free of control characters."""
    value = clean_text(value)
    problem = control_character_problem(value.strip())
    if problem is not None:
        raise ValueError(problem)
    return value


# Deeper than any real transcript or filter; far below Python's recursion limit, so a hostile
# document is a 422 and never a RecursionError (500) in a validator or serializer.
MAX_JSON_DEPTH = 64


def json_depth_problem(value: Any, limit: int = MAX_JSON_DEPTH) -> str | None:
    """Why ``value`` nests too deeply, or None. Iterative: any depth is measured safely."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, list | dict):
            continue
        if depth > limit:
            return f"JSON is nested deeper than {limit} levels"
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children)
    return None


def clean_json(value: Any) -> Any:
    """Check every string (keys too) and number in a JSON document, and its depth."""
    problem = json_depth_problem(value)
    if problem:
        raise ValueError(problem)
    return _clean_json(value)


def _clean_json(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("numbers must be finite")
    if isinstance(value, list):
        return [_clean_json(item) for item in value]
    if isinstance(value, dict):
        return {clean_text(str(k)): _clean_json(v) for k, v in value.items()}
    return value


ShortText = Annotated[str, Field(max_length=64), AfterValidator(clean_identifier)]
IdText = Annotated[str, Field(max_length=128), AfterValidator(clean_identifier)]
Text = Annotated[str, Field(max_length=1_000_000), AfterValidator(clean_text)]
# An idempotency key (or any other long identifier).
KeyText = Annotated[
    str, Field(min_length=1, max_length=IDEMPOTENCY_KEY_MAX), AfterValidator(clean_identifier)
]
SessionKeyText = Annotated[
    str, Field(min_length=1, max_length=IDEMPOTENCY_KEY_MAX), AfterValidator(clean_session_key)
]
JsonValue = Annotated[Any, AfterValidator(clean_json)]
Int32 = Annotated[int, Field(ge=0, le=INT32_MAX)]
EpochMs = Annotated[int, Field(ge=0, le=MS_MAX)]


class ErrorOut(Schema):
    """Every error: a message (or a list of field errors for 422s) and a stable code."""

    detail: str | list[dict[str, Any]]
    code: str

    model_config = {"extra": "allow"}


# Error statuses an operation documents, by kind of operation.
AUTH_ERRORS = (401, 403)
READ_ERRORS = (*AUTH_ERRORS, 404, 422)
WRITE_ERRORS = (400, *AUTH_ERRORS, 404, 409, 413, 422)


def errors(*codes: int) -> dict[int, type[ErrorOut]]:
    """``response=`` entries for error statuses (500 is always possible and documented)."""
    return {code: ErrorOut for code in (*codes, 500)}


class TokenIn(Schema):
    name: Annotated[str, Field(min_length=1, max_length=100), AfterValidator(clean_text)]
    scope: Literal["read", "operate", "admin"] = "read"

    model_config = {"extra": "forbid"}


class TokenOut(Schema):
    id: int
    name: str
    scope: str
    prefix: str
    username: str
    created_at: int
    last_used_at: int | None
    revoked_at: int | None

    @staticmethod
    def resolve_username(obj: Any) -> str:
        # An ApiToken row, or an already-rendered dict (the idempotent replay of a creation).
        if isinstance(obj, dict):
            return str(obj["username"])
        user = getattr(obj, "user", None)
        return str(user.get_username()) if user is not None else str(obj.username)


class TokenCreatedOut(TokenOut):
    token: str = Field(description="The plaintext token. It is shown once and never again.")


class TokenListOut(Schema):
    items: list[TokenOut]


# --- path parameters ------------------------------------------------------------------------


class SessionKeyConverter:
    """A session key in a URL path: slashes allowed, and any other character too.

    Django's ``path`` converter stops at a newline, and an unmatched URL falls through to the
    site's HTML 404 page; this one matches everything, so the API answers with its JSON 404.
    """

    regex = r"[\s\S]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(SessionKeyConverter, "sessionkey")


class AnyTextConverter(SessionKeyConverter):
    """A stored key or id in a console URL, whatever it holds.

    New keys and ids cannot contain control characters, but a row stored before that rule (or
    written to the database by hand) may: Django's ``path`` converter cannot reverse a value
    with a line break (``NoReverseMatch``, a 500 on every page listing the row). This one
    matches any character; ``reverse`` percent-encodes it (``%0A``) and the request decodes it
    back, so the page opens and links to the row.
    """


register_converter(AnyTextConverter, "anytext")
