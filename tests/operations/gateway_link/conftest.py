"""The scripted fake gateway, one per test (``address, script = gateway``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .fake_gateway import Script, scripted_gateway


@pytest.fixture
def gateway() -> Iterator[tuple[str, Script]]:
    with scripted_gateway() as running:
        yield running


@pytest.fixture(autouse=True)
def link_hosts_allowed(settings):
    """The fake gateway listens on 127.0.0.1, which a link reaches only when the server's
    OPENSQUILLA_GATEWAY_LINK_HOSTS names it exactly."""
    settings.OPENSQUILLA_GATEWAY_LINK_HOSTS = ["127.0.0.1"]


@pytest.fixture
def repairs_inline(monkeypatch):
    """A queued "run due repairs" runs here, as the worker would run it, when it is published
    (after the page's transaction commits: wrap the request in
    ``django_capture_on_commit_callbacks(execute=True)``); returns each run's kwargs."""
    from operations_app import tasks

    sent: list[dict] = []

    def apply_async(args=(), kwargs=None, **_options):
        sent.append(kwargs)
        tasks.run_gateway_repairs.apply(kwargs=kwargs)

    monkeypatch.setattr(tasks.run_gateway_repairs, "apply_async", apply_async)
    return sent
