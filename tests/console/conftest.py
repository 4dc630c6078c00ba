"""Logged-in clients for each console role."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.factories import make_user


def _client_for(role: str | None, username: str) -> Client:
    client = Client()
    make_user(username, role)
    client.login(username=username, password="pw-Secret-123")
    return client


@pytest.fixture
def viewer_client(db) -> Client:
    return _client_for("viewer", "vera")


@pytest.fixture
def operator_client(db) -> Client:
    return _client_for("operator", "otto")


@pytest.fixture
def admin_client_role(db) -> Client:
    return _client_for("admin", "ada")


@pytest.fixture
def norole_client(db) -> Client:
    return _client_for(None, "nobody")


HX = {"HTTP_HX_REQUEST": "true"}


def hx(target: str) -> dict[str, str]:
    """Headers htmx sends for a request that swaps ``#target``."""
    return {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": target}
