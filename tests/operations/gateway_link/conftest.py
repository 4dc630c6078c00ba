"""The scripted fake gateway, one per test (``address, script = gateway``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .fake_gateway import Script, scripted_gateway


@pytest.fixture
def gateway() -> Iterator[tuple[str, Script]]:
    with scripted_gateway() as running:
        yield running
