"""Who is calling the API, and with which scope.

Two ways in, tried in this order on every operation:
- ``Authorization: Bearer osq_…``: an API token; it acts with the lower of its own scope and
  the scope its user's role grants now (checked on every request, so demoting or stripping a
  user takes effect on their tokens at once).
- The Django session cookie, for the console's own browser calls. Those are CSRF-checked,
  and the user's scope follows their role: superuser or ``admin`` group → admin,
  ``receipts_app.operate_receipts`` → operate, view permission on receipts → read.

Scopes are ordered ``read`` < ``operate`` < ``admin``. A caller who is known but lacks the
scope gets 403; an unknown caller gets 401.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from ninja.errors import AuthenticationError
from ninja.security import APIKeyCookie, HttpBearer
from ninja.utils import check_csrf

from .exceptions import PermissionDeniedError
from .models import ApiToken
from .roles import scope_for_user
from .tokens import authenticate_token, effective_scope, scope_allows


class CsrfFailed(PermissionDeniedError):
    code = "csrf_failed"


@dataclass(frozen=True)
class Principal:
    """The authenticated caller, set as ``request.auth`` on every operation."""

    user: Any
    scope: str
    token: ApiToken | None = None

    @property
    def actor_name(self) -> str:
        """The audit identity: the user, plus the token name when a token was used."""
        name = str(self.user.get_username())
        if self.token is not None:
            name = f"{name} (token {self.token.name})"
        return name[:150]

    @property
    def idempotency_owner(self) -> str:
        """Idempotency keys are private to one token (or one console user)."""
        if self.token is not None:
            return self.token.digest
        return f"user:{self.user.pk}"


def _require(principal: Principal, required: str) -> Principal:
    if not scope_allows(principal.scope, required):
        raise PermissionDeniedError(
            f"this call needs the {required!r} scope; the caller has {principal.scope!r}",
            extra={"required_scope": required},
        )
    return principal


class BearerTokenAuth(HttpBearer):
    def __init__(self, required_scope: str) -> None:
        self.required_scope = required_scope
        super().__init__()

    def authenticate(self, request: HttpRequest, token: str) -> Principal | None:
        api_token = authenticate_token(token)
        if api_token is None:
            # A presented token that does not work is an error, never a fall-through to
            # the session cookie: a script must learn that its token is dead.
            raise AuthenticationError(message="invalid, unknown or revoked API token")
        scope = effective_scope(api_token)
        if scope is None:
            raise PermissionDeniedError("the token's user has no role that may use the API")
        return _require(
            Principal(user=api_token.user, scope=scope, token=api_token), self.required_scope
        )


class ConsoleSessionAuth(APIKeyCookie):
    """Django's session cookie, CSRF-checked for unsafe methods."""

    param_name = settings.SESSION_COOKIE_NAME

    def __init__(self, required_scope: str) -> None:
        self.required_scope = required_scope
        super().__init__(csrf=True)

    def _get_key(self, request: HttpRequest) -> str | None:
        key = request.COOKIES.get(self.param_name)
        # Only a request that carries the session cookie can ride on it, so only such a
        # request needs the CSRF check; a cookie-less script call then gets a plain 401.
        if key and check_csrf(request) is not None:
            raise CsrfFailed(
                "CSRF check failed: send the X-CSRFToken header with the csrftoken cookie"
            )
        return key

    def authenticate(self, request: HttpRequest, key: str | None) -> Principal | None:
        user = getattr(request, "user", None)
        if not key or user is None or not user.is_authenticated:
            return None
        scope = scope_for_user(user)
        if scope is None:
            raise PermissionDeniedError("your account has no role that may use the API")
        return _require(Principal(user=user, scope=scope), self.required_scope)


def requires(scope: str) -> list[Any]:
    """The ``auth=`` value of an operation that needs ``scope``."""
    return [BearerTokenAuth(scope), ConsoleSessionAuth(scope)]


READ = requires("read")
OPERATE = requires("operate")
ADMIN = requires("admin")


def principal(request: HttpRequest) -> Principal:
    auth = getattr(request, "auth", None)
    if not isinstance(auth, Principal):  # pragma: no cover - every operation declares auth
        raise AuthenticationError()
    return auth
