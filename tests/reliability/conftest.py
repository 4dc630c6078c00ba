"""The ``soak`` marker (registered in pyproject.toml): long variants that run only when asked
for (``pytest -m soak``, ``make soak``).

Soak tests are deselected, not skipped, unless ``-m`` names ``soak``, so a service-marked soak
test never counts as a skip under ``OPENSQUILLA_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations


def pytest_collection_modifyitems(config, items):
    if "soak" in (config.getoption("markexpr") or ""):
        return
    kept, dropped = [], []
    for item in items:
        (dropped if item.get_closest_marker("soak") else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
