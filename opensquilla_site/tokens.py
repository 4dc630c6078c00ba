"""API token services: create (plaintext shown once), revoke, authenticate.

A token reads ``osq_<prefix>_<secret>``. Only ``sha256(secret)`` is stored, so a database
leak does not leak usable tokens; the short ``prefix`` is stored in clear so an operator can
tell tokens apart in a list.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import OuterRef

from .models import ApiToken
from .roles import grant_annotations, scope_for_user
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


def authenticate_token(plaintext: str) -> ApiToken | None:
    """The live token for ``plaintext``, or None (malformed, unknown, revoked, inactive user).

    The row comes annotated with its user's role grants (``roles.scope_of_annotated``), read in
    the same query, so checking the role on every request costs nothing extra.

    The lookup is by digest, so nothing compares the caller's secret byte by byte against a
    stored one; the prefix check uses a constant-time compare anyway.
    """
    split = _split(plaintext or "")
    if split is None:
        return None
    prefix, secret = split
    token = (
        ApiToken.objects.select_related("user")
        .annotate(**grant_annotations(OuterRef("user_id")))
        .filter(digest=_digest(secret), revoked_at__isnull=True)
        .first()
    )
    if token is None or not hmac.compare_digest(token.prefix, prefix):
        return None
    if not token.user.is_active:
        return None
    now = now_ms()
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION_MS:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token
