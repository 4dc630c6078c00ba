"""gunicorn's own error answers, in the API's error contract.

gunicorn answers a request it cannot parse (a request line over ``limit_request_line``: 414;
too many or too large headers: 431; a malformed request line or header: 400) itself, before
Django sees it, with an HTML page. Clients of ``/api/`` expect JSON ``{"detail", "code"}``
for every error, and the path is often not even known at that point (the line was too long to
read), so every such answer is JSON, with the security headers every other answer carries.

gunicorn writes those answers through ``gunicorn.util.write_error`` (looked up at call time
by its workers' ``handle_error``); ``install()`` points it at ``write_json_error``. It runs in
the master's ``on_starting`` hook (gunicorn.conf.py), so every forked worker inherits it.
Django-free: the config file loads this before any Django setup.
"""

from __future__ import annotations

import json
import socket

from gunicorn import util

CODES = {
    400: "bad_request",
    403: "forbidden",
    414: "uri_too_long",
    417: "expectation_failed",
    431: "request_header_fields_too_large",
    500: "internal_error",
    501: "not_implemented",
}
# The fixed headers of a page's answer that fit a JSON error (opensquilla_site.headers).
HEADERS = (
    ("Content-Type", "application/json"),
    ("Cache-Control", "private, no-store"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "same-origin"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
    ("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'"),
)
_MAX_DETAIL = 300


def json_error(status_int: int, reason: str, mesg: str) -> bytes:
    """The whole HTTP answer: status line, headers, JSON body; the connection closes after."""
    detail = f"{reason}: {mesg}" if mesg else reason
    body = json.dumps(
        {"detail": detail[:_MAX_DETAIL], "code": CODES.get(status_int, "http_error")}
    ).encode()
    lines = [f"HTTP/1.1 {status_int} {reason}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in HEADERS]
    lines.append(f"Content-Length: {len(body)}")
    # The reason comes from gunicorn's own table; latin-1 is what it writes too.
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def write_json_error(sock: socket.socket, status_int: int, reason: str, mesg: str) -> None:
    util.write_nonblock(sock, json_error(status_int, reason, mesg))


def install() -> None:
    util.write_error = write_json_error
