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

from .models import ApiToken
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


def create_api_token(*, user: User, name: str, scope: str) -> tuple[ApiToken, str]:
    """Create a token; returns it with its plaintext, which is never retrievable again."""
    name = (name or "").strip()
    if not name:
        raise ValueError("token name must not be empty")
    if len(name) > 100:
        raise ValueError("token name is longer than 100 characters")
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}; got {scope!r}")
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

    The lookup is by digest, so nothing compares the caller's secret byte by byte against a
    stored one; the prefix check uses a constant-time compare anyway.
    """
    split = _split(plaintext or "")
    if split is None:
        return None
    prefix, secret = split
    token = (
        ApiToken.objects.select_related("user")
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
