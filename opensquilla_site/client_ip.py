"""The client address the per-IP login limit counts.

Behind a reverse proxy every request arrives from the proxy's address, so without help all
clients share one per-IP budget (a limit that is stricter, never looser). Set
``OPENSQUILLA_TRUSTED_PROXY_HEADER`` to the header your proxy sets (``X-Forwarded-For`` or
``X-Real-IP``) to count each client on its own. Only the right-most address of the header is
used: that is the one the trusted proxy appended, while anything to its left came from the
client and can be forged. Never set it when clients can reach the server directly.
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def _meta_key(header: str) -> str:
    return "HTTP_" + header.strip().upper().replace("-", "_")


def client_ip(request: HttpRequest) -> str:
    header = getattr(settings, "OPENSQUILLA_TRUSTED_PROXY_HEADER", "")
    if header:
        values = [v.strip() for v in request.META.get(_meta_key(header), "").split(",")]
        candidate = values[-1] if values else ""
        try:
            return str(ipaddress.ip_address(candidate))
        except ValueError:
            pass  # no usable header (a direct request, or garbage): count the peer address
    return str(request.META.get("REMOTE_ADDR") or "0.0.0.0")  # noqa: S104 - a key, not a bind
