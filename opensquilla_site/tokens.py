"""API token services: create (plaintext shown once), revoke, authenticate.

A token reads ``osq_<prefix>_<secret>``. Only ``sha256(secret)`` is stored, so a database
leak does not leak usable tokens; the short ``prefix`` is stored in clear so an operator can
tell tokens apart in a list.
"""

# The lookup's SQL interpolates names from model metadata only; values are bound parameters.
# ruff: noqa: S608

from __future__ import annotations

import hashlib
import hmac
import secrets
from functools import cache

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import connection, transaction

from . import prepared_sql
from .models import ApiToken
from .roles import grant_columns_sql, scope_for_user, scope_of_annotated
from .timeutil import now_ms

TOKEN_PREFIX = "osq"
SCOPES: tuple[str, ...] = ApiToken.SCOPES
# Writing last_used_at on every call would turn every read into a write; a minute is precise
# enough to answer "is this token still in use?".
LAST_USED_RESOLUTION_MS = 60_000


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def scope_allows(granted: str, required: str) -> bool:
    """``read`` < ``operate`` < ``admin``."""
    if granted not in SCOPES or required not in SCOPES:
        return False
    return SCOPES.index(granted) >= SCOPES.index(required)


def lower_scope(a: str, b: str) -> str:
    return a if SCOPES.index(a) <= SCOPES.index(b) else b


def effective_scope(token: ApiToken) -> str | None:
    """The scope ``token`` acts with now: the lower of its own and its user's current role's.

    None when the user has no role (or is inactive): such a token opens nothing. Every door
    that takes a token (the API, ``/metrics``, the API docs) asks this, so a token never
    outranks its user anywhere. ``token`` comes from ``authenticate_token`` (grants read).
    """
    role_scope = scope_of_annotated(token)
    if role_scope is None:
        return None
    return lower_scope(token.scope, role_scope)


def create_api_token(*, user: User, name: str, scope: str) -> tuple[ApiToken, str]:
    """Create a token; returns it with its plaintext, which is never retrievable again.

    ValueError when ``scope`` is above what the user's role grants (a token never outranks
    its user; authentication caps it again on every request, should the role change)."""
    name = (name or "").strip()
    if not name:
        raise ValueError("token name must not be empty")
    if len(name) > 100:
        raise ValueError("token name is longer than 100 characters")
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}; got {scope!r}")
    role_scope = scope_for_user(user)
    if role_scope is None or not scope_allows(role_scope, scope):
        grants = f"at most {role_scope!r}" if role_scope else "no API scope (no role)"
        raise ValueError(
            f"{user.get_username()}'s role grants {grants}; a token of scope {scope!r} "
            "would be above it"
        )
    prefix = secrets.token_hex(4)
    secret = secrets.token_urlsafe(32)
    with transaction.atomic():
        token = ApiToken.objects.create(
            name=name, user=user, scope=scope, prefix=prefix, digest=_digest(secret)
        )
    return token, f"{TOKEN_PREFIX}_{prefix}_{secret}"


def revoke_api_token(*, token_id: int) -> ApiToken:
    """Revoke a token; revoking twice keeps the first revocation time. KeyError if unknown."""
    with transaction.atomic():
        token = ApiToken.objects.select_for_update().filter(pk=token_id).first()
        if token is None:
            raise KeyError(f"API token not found: {token_id}")
        if token.revoked_at is None:
            token.revoked_at = now_ms()
            token.save(update_fields=["revoked_at"])
    return token


def _split(plaintext: str) -> tuple[str, str] | None:
    parts = plaintext.strip().split("_", 2)
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX or not parts[1] or not parts[2]:
        return None
    return parts[1], parts[2]


@cache
def _lookup_sql() -> tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The token lookup, built once: the token's columns, its user's, and the role grants."""
    user_model = get_user_model()
    token_columns = tuple(f.attname for f in ApiToken._meta.concrete_fields)
    user_columns = tuple(f.attname for f in user_model._meta.concrete_fields)
    grants, params = grant_columns_sql("t.user_id")
    sql = (
        f"SELECT {', '.join('t.' + c for c in token_columns)}, "
        f"{', '.join('u.' + c for c in user_columns)}, {grants} "
        f"FROM {ApiToken._meta.db_table} t JOIN {user_model._meta.db_table} u ON u.id = t.user_id "
        "WHERE t.digest = %s AND t.revoked_at IS NULL"
    )
    return sql, tuple(params), token_columns, user_columns


def _find_live_token(digest: str) -> ApiToken | None:
    sql, grant_params, token_columns, user_columns = _lookup_sql()
    with prepared_sql.cursor() as cur:  # planned once per connection, not per request
        prepared_sql.execute(cur, sql, [*grant_params, digest])
        row = cur.fetchone()
    if row is None:
        return None
    n, m = len(token_columns), len(user_columns)
    token = ApiToken.from_db(connection.alias, token_columns, row[:n])
    token.user = get_user_model().from_db(connection.alias, user_columns, row[n : n + m])
    # read by roles.scope_of_annotated; SQLite answers EXISTS with 0/1
    for name, value in zip(
        ("grant_admin", "grant_operate", "grant_view"), row[n + m :], strict=True
    ):
        setattr(token, name, bool(value))
    return token


def authenticate_token(plaintext: str) -> ApiToken | None:
    """The live token for ``plaintext``, or None (malformed, unknown, revoked, inactive user).

    One statement, built once (``_lookup_sql``): the token, its user and the user's role grants
    (``roles.scope_of_annotated``), so checking the role on every request costs nothing extra.

    The lookup is by digest, so nothing compares the caller's secret byte by byte against a
    stored one; the prefix check uses a constant-time compare anyway.
    """
    split = _split(plaintext or "")
    if split is None:
        return None
    prefix, secret = split
    token = _find_live_token(_digest(secret))
    if token is None or not hmac.compare_digest(token.prefix, prefix):
        return None
    if not token.user.is_active:
        return None
    now = now_ms()
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION_MS:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token
