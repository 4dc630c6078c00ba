"""What a real gunicorn answers for requests it refuses before Django sees them: JSON, never HTML.

A long URL that the API's filters accept reaches Django (the request-line limit is gunicorn's
maximum); anything gunicorn itself still refuses (a longer line, too many or too large
headers, a malformed request line) is the API's ``{"detail", "code"}`` with the status
gunicorn chose and the security headers every other answer carries.
"""

from __future__ import annotations

import json
import socket

import pytest

from tests.reliability.test_gunicorn import start_gunicorn  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db(transaction=True)


def _raw(server, request: bytes) -> tuple[int, dict[str, str], bytes]:
    host, port = server.bind.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body


def _get(path: str, extra_headers: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra_headers}Connection: close\r\n\r\n".encode()


def _json_error(status: int, headers: dict[str, str], body: bytes, expected: int, code: str):
    assert status == expected, body[:300]
    assert headers["content-type"].startswith("application/json"), headers
    parsed = json.loads(body)
    assert parsed["code"] == code and parsed["detail"], parsed
    assert b"<html" not in body.lower()
    for name in ("x-content-type-options", "x-frame-options", "content-security-policy"):
        assert name in headers, name
    assert "no-store" in headers["cache-control"]


def test_requests_gunicorn_refuses_are_json_errors(start_gunicorn):  # noqa: F811
    server = start_gunicorn()
    # A filter value the API accepts, in a URL past gunicorn's default 4,094-byte line limit:
    # Django answers it (401: no token), as JSON.
    status, headers, body = _raw(
        server, _get("/api/v1/receipts?idempotency_key=" + "k" * 3990 + "&reason=" + "r" * 400)
    )
    assert status == 401 and json.loads(body)["code"] == "unauthorized", body[:300]

    cases = [
        (_get("/api/v1/receipts?x=" + "a" * 9000), 414, "uri_too_long"),
        (
            _get("/api/v1/receipts", "".join(f"X-H{i}: v\r\n" for i in range(120))),
            431,
            "request_header_fields_too_large",
        ),
        (
            _get("/api/v1/receipts", "X-Big: " + "b" * 9000 + "\r\n"),
            431,
            "request_header_fields_too_large",
        ),
        (b"GARBAGE\r\n\r\n", 400, "bad_request"),
        (
            b"GET /api/v1/receipts HTTP/1.1\r\nHost: x\r\nBad Header Name: v\r\n\r\n",
            400,
            "bad_request",
        ),
    ]
    for request, expected, code in cases:
        _json_error(*_raw(server, request), expected, code)
