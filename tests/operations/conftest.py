"""Fixtures shared by the operations tests."""

from __future__ import annotations

import pytest

from opensquilla_site.tokens import create_api_token
from operations_app import heartbeats
from tests.factories import make_user


@pytest.fixture
def read_token(db) -> str:
    owner = make_user("scraper", "viewer")
    _token, plaintext = create_api_token(user=owner, name="prometheus", scope="read")
    return plaintext


@pytest.fixture(autouse=True)
def _fresh_heartbeat_throttle():
    """The per-process write throttle must not carry one test's heartbeats into the next."""
    heartbeats._last_write.clear()
    yield
    heartbeats._last_write.clear()
