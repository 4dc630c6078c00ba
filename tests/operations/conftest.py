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


@pytest.fixture
def allow_local_targets(settings):
    """The receivers run on 127.0.0.1, which the default policy refuses."""
    settings.OPENSQUILLA_ALERT_ALLOW_PRIVATE_TARGETS = True


@pytest.fixture
def run_deliveries_inline(monkeypatch):
    """Deliveries run right here instead of on a broker: each publish becomes an eager run,
    and a retry's countdown is recorded instead of waited for."""
    from operations_app import tasks

    scheduled: list[tuple[int, float | None]] = []

    def apply_async(args, countdown=None, **_kw):
        scheduled.append((args[0], countdown))
        if countdown is None:
            tasks.deliver_alert.apply(args)

    monkeypatch.setattr(tasks.deliver_alert, "apply_async", apply_async)
    return scheduled
