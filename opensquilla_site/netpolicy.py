"""Which network addresses a server-side connection may reach: the one rule for every place
this site connects to an address somebody typed (alert webhooks, the gateway link).

A host is resolved, and an address that is private, loopback, link-local, reserved,
multicast or unspecified counts as private: reaching it from the server would let whoever
typed the address probe the server's own network.
"""

from __future__ import annotations

import ipaddress
import socket

from django.core.exceptions import ValidationError


def resolve_host(host: str, port: int) -> list[str]:
    """The host's addresses; ``ValidationError`` when it does not resolve."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise ValidationError(f"The host {host!r} does not resolve.") from exc
    return sorted({str(info[4][0]) for info in infos})


def is_private_address(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    return bool(
        ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_reserved
        or ip.is_multicast
        or ip.is_unspecified
    )
