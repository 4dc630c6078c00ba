"""Which gateways are linked, from the environment as well as the admin.

``OPENSQUILLA_GATEWAY_LINKS``: ``NAME=ADDRESS`` entries separated by spaces or commas
(``host-a=ws://10.0.0.5:18791/ws host-b=gw-b.internal``), each naming a gateway (created when
new) and its RPC address. The token is never in this variable: the link reads it from the
environment variable the gateway names (``Gateway.rpc_token_env``), by default
``OPENSQUILLA_GATEWAY_TOKEN_<NAME>`` (``host-a`` → ``OPENSQUILLA_GATEWAY_TOKEN_HOST_A``).

An address configured here is written onto the gateway before each read, so the
environment wins over an address typed in the admin for the same gateway.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.conf import settings

from sessions_app.gateways import GatewayNameError, ensure_gateway, validate_gateway_name

from .client import gateway_ws_url


class LinkConfigError(ValueError):
    """An ``OPENSQUILLA_GATEWAY_LINKS`` entry that names no gateway or no address."""


@dataclass(frozen=True)
class ConfiguredLink:
    gateway: str
    address: str


def parse_links(text: str) -> list[ConfiguredLink]:
    out: dict[str, ConfiguredLink] = {}
    for entry in (e for e in re.split(r"[\s,]+", text.strip()) if e):
        name, sep, address = entry.partition("=")
        if not sep or not address:
            raise LinkConfigError(f"OPENSQUILLA_GATEWAY_LINKS entry {entry!r} is not NAME=ADDRESS")
        try:
            validate_gateway_name(name)
            gateway_ws_url(address)
        except (GatewayNameError, ValueError) as exc:
            raise LinkConfigError(f"OPENSQUILLA_GATEWAY_LINKS entry {entry!r}: {exc}") from exc
        if name in out:
            raise LinkConfigError(f"gateway {name!r} is linked twice in OPENSQUILLA_GATEWAY_LINKS")
        out[name] = ConfiguredLink(name, address)
    return list(out.values())


def configured_links() -> list[ConfiguredLink]:
    text = getattr(settings, "OPENSQUILLA_GATEWAY_LINKS", None)
    return parse_links(text) if text else []


def apply_configured_links() -> list[ConfiguredLink]:
    """Write each configured address onto its gateway; returns what was configured."""
    links = configured_links()
    for link in links:
        ensure_gateway(link.gateway, rpc_address=link.address)
    return links
