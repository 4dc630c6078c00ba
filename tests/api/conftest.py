"""API test fixtures: a caller per scope, and a JSON client that speaks Bearer tokens."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client

from opensquilla_site.tokens import create_api_token
from tests.factories import make_user

API = "/api/v1"


@dataclass
class ApiCaller:
    """A Django test client bound to one Bearer token (or none)."""

    client: Client
    token: str | None = None

    def _headers(self, extra: dict[str, str] | None) -> dict[str, str]:
        headers = dict(extra or {})
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def get(self, path: str, params: Any = None, headers: dict[str, str] | None = None):
        return self.client.get(API + path, params, headers=self._headers(headers))

    def send(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        headers: dict[str, str] | None = None,
        raw: str | bytes | None = None,
    ):
        data = raw if raw is not None else (json.dumps(body) if body is not None else "")
        call = getattr(self.client, method.lower())
        return call(
            API + path, data=data, content_type="application/json", headers=self._headers(headers)
        )

    def post(self, path: str, body: Any = None, **kw: Any):
        return self.send("POST", path, body, **kw)

    def put(self, path: str, body: Any = None, **kw: Any):
        return self.send("PUT", path, body, **kw)

    def patch(self, path: str, body: Any = None, **kw: Any):
        return self.send("PATCH", path, body, **kw)

    def delete(self, path: str, **kw: Any):
        return self.send("DELETE", path, None, **kw)


def _caller(username: str, role: str, scope: str) -> ApiCaller:
    user = make_user(username, role)
    _token, plaintext = create_api_token(user=user, name=f"{username}-token", scope=scope)
    return ApiCaller(Client(), plaintext)


@pytest.fixture
def reader(db) -> ApiCaller:
    return _caller("reader", "viewer", "read")


@pytest.fixture
def operator(db) -> ApiCaller:
    return _caller("operator", "operator", "operate")


@pytest.fixture
def admin(db) -> ApiCaller:
    return _caller("admin", "admin", "admin")


@pytest.fixture
def anonymous(db) -> ApiCaller:
    return ApiCaller(Client())


def assert_error(response, status: int, code: str) -> dict[str, Any]:
    """The uniform error contract: JSON ``{detail, code}`` with the right status."""
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert body["code"] == code, body
    assert body["detail"]
    assert "Traceback" not in response.content.decode()
    return body


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    # Each caller fixture creates a user; the production hasher would dominate the suite's time.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
