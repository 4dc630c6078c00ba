"""What the gateway link may reach and what it may send (docs/MIRROR.md#gateway-link).

The link connects from the server to an address somebody typed, carrying a token it reads
from the server's environment. Both are bounded by the server's own settings, never by the
console or the admin:

- **the token**: only a variable named ``OPENSQUILLA_GATEWAY_TOKEN_*`` is ever read, so the
  link can carry no secret but a gateway token (never ``DJANGO_SECRET_KEY`` or
  ``DATABASE_URL``). A stored name outside the prefix (written before this rule) is not read:
  the link stays unread and says why.
- **the address**: its host must be allowed by ``OPENSQUILLA_GATEWAY_LINK_HOSTS`` (matched as
  Django matches ``ALLOWED_HOSTS``: ``gw.example.com``, ``.example.com`` for a domain and its
  subdomains, ``*`` for any host), or be the host of an ``OPENSQUILLA_GATEWAY_LINKS`` entry
  (the environment's own links). A host reached through a pattern (``*``, ``.domain``) must
  not resolve to a private, loopback or link-local address (``opensquilla_site.netpolicy``,
  the alert webhooks' rule); a host named exactly may, since the server's operator named it.

Checked when an address is typed (model, admin, ``import_opensquilla --rpc-address``) and
again before every connection (settings and DNS change).
"""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.http.request import validate_host

from opensquilla_site.netpolicy import is_private_address, resolve_host

DEFAULT_RPC_PORT = 18791
ENV_VAR_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
LINK_VARIABLE_PREFIX = "OPENSQUILLA_GATEWAY_TOKEN_"
TOKEN_ENV_PATTERN = re.compile(r"^OPENSQUILLA_GATEWAY_TOKEN_[A-Z0-9_]+$")
HOSTS_SETTING = "OPENSQUILLA_GATEWAY_LINK_HOSTS"


def rpc_ws_url(address: str) -> str:
    """A gateway's RPC address as its WebSocket URL: ``host[:port]``, ``http(s)://host[:port]``
    or ``ws(s)://host[:port][/ws]`` → ``ws(s)://host:port/ws``. Raises ``ValueError`` for an
    address that names no host."""
    text = address.strip()
    if "://" not in text:
        text = f"ws://{text}"
    parts = urlsplit(text)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"not a gateway address: {address!r} (bad port)") from exc
    if scheme not in {"ws", "wss"} or not parts.hostname or any(c.isspace() for c in text):
        raise ValueError(f"not a gateway address: {address!r}")
    # A bare or plain address means the gateway itself (port 18791); TLS means a proxy on 443.
    netloc = parts.netloc if port or scheme == "wss" else f"{parts.netloc}:{DEFAULT_RPC_PORT}"
    path = parts.path.rstrip("/") or "/ws"
    return urlunsplit((scheme, netloc, path, "", ""))


# --- the token ------------------------------------------------------------------------------


def token_env_refusal(name: str) -> str | None:
    """Why the link must not read variable ``name`` (None: it may)."""
    if TOKEN_ENV_PATTERN.match(name):
        return None
    return (
        f"the token variable {name} is not an {LINK_VARIABLE_PREFIX}* name: the link reads "
        "no other variable, so it sends nothing until the variable is renamed"
    )


def validate_token_env(value: str) -> None:
    # Says nothing of whether the variable exists: only its name is judged.
    if value and token_env_refusal(value):
        raise ValidationError(
            f"Name a variable that starts with {LINK_VARIABLE_PREFIX} (upper case, digits, _): "
            "the link reads no other variable."
        )


def read_token(name: str) -> str | None:
    """The token from the environment, only ever from a variable the link may read."""
    if token_env_refusal(name):
        return None
    return os.environ.get(name) or None


# --- the address ----------------------------------------------------------------------------


def allowed_link_hosts() -> list[str]:
    """The host patterns of ``OPENSQUILLA_GATEWAY_LINK_HOSTS``, lower-cased."""
    value = getattr(settings, HOSTS_SETTING, None) or []
    if isinstance(value, str):
        value = re.split(r"[\s,]+", value)
    return [str(h).strip().lower() for h in value if str(h).strip()]


def configured_link_hosts() -> set[str]:
    """The hosts of ``OPENSQUILLA_GATEWAY_LINKS`` (the server's own links; unreadable entries
    are the link configuration's to report, not this rule's)."""
    text = getattr(settings, "OPENSQUILLA_GATEWAY_LINKS", None) or ""
    hosts = set()
    for entry in (e for e in re.split(r"[\s,]+", text.strip()) if e):
        _name, _sep, address = entry.partition("=")
        try:
            host = urlsplit(rpc_ws_url(address)).hostname
        except ValueError:
            continue
        if host:
            hosts.add(host.lower())
    return hosts


def _named_exactly(host: str, patterns: list[str]) -> bool:
    return host in {p.strip("[]") for p in patterns if p != "*" and not p.startswith(".")}


def address_refusal(address: str) -> str | None:
    """Why the link must not connect to ``address`` (None: it may). A host matched through a
    pattern is looked up each time (DNS can change between typing and connecting)."""
    try:
        url = rpc_ws_url(address)
    except ValueError as exc:
        return str(exc)
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    patterns = allowed_link_hosts()
    if host in configured_link_hosts() or _named_exactly(host, patterns):
        return None
    if not validate_host(host, patterns):
        return f"the host {host} is not in {HOSTS_SETTING}"
    try:
        addresses = resolve_host(host, parts.port or DEFAULT_RPC_PORT)
    except ValidationError:
        return f"the host {host} does not resolve"
    if any(is_private_address(a) for a in addresses):
        return (
            f"the host {host} resolves to a private or local address; name it exactly in "
            f"{HOSTS_SETTING} to allow it"
        )
    return None


def validate_link_address(value: str) -> None:
    if not value:
        return
    try:
        rpc_ws_url(value)
    except ValueError as exc:
        raise ValidationError(f"{exc}: use ws://host:port/ws (or host:port)") from exc
    refusal = address_refusal(value)
    if refusal:
        raise ValidationError(f"This server does not link to that address: {refusal}.")
