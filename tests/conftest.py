"""Shared fixtures, and the rule that CI may not skip a service-backed test.

``.ci/run`` sets ``OPENSQUILLA_REQUIRE_SERVICES=1``. Then a test marked ``postgres``,
``redis``, ``browser``, ``worker`` or ``reference`` (the opensquilla 0.3.0 venv that
``bench/reference_venv.sh`` builds) that skips is reported as a failure.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from opensquilla_site.runtime import ensure_runtime_dirs

# The suite pins its own settings: a developer's .env (written by `make run`) is read neither
# here nor by the processes the tests start (workers, manage.py). Settings create no
# directory at import, so the suite makes var/ (its SQLite file, the broker folders) itself.
os.environ["OPENSQUILLA_ENV_FILE"] = ""
ensure_runtime_dirs()

# Written by PyPI opensquilla==0.3.0 (bench/make_golden.py regenerates it); see tests/golden/README.md.
GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
SERVICE_MARKERS = ("postgres", "redis", "browser", "worker", "reference")
REQUIRE_SERVICES = os.environ.get("OPENSQUILLA_REQUIRE_SERVICES") == "1"


def pytest_collection_modifyitems(config, items):
    """Run browser tests last: Playwright's sync API keeps an event loop running in the main
    thread for the rest of the session, which async tests cannot share."""
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not REQUIRE_SERVICES or not report.skipped:
        return
    needed = [m for m in SERVICE_MARKERS if item.get_closest_marker(m)]
    if needed:
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.longrepr = f"CI requires {', '.join(needed)} but the test skipped: {reason}"


def is_postgres() -> bool:
    return django_settings.DATABASES["default"]["ENGINE"].endswith("postgresql")


@pytest.fixture
def workspace(tmp_path, settings) -> Path:
    """A checkpoint workspace configured in settings, as the product runs it."""
    root = tmp_path / "workspace"
    root.mkdir()
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(root)
    return root


@pytest.fixture
def golden_dir() -> Path:
    if not GOLDEN_DIR.is_dir():
        pytest.fail(f"golden data not found at {GOLDEN_DIR}")
    return GOLDEN_DIR


@pytest.fixture
def require_postgres():
    if not is_postgres():
        pytest.skip("needs PostgreSQL: set DATABASE_URL=postgres://...")


@pytest.fixture(autouse=True)
def _close_async_thread_connections():
    """Close DB connections opened by ``sync_to_async`` in asgiref's shared thread.

    Otherwise PostgreSQL refuses to drop the test database at the end of the run.
    """
    yield
    from asgiref.sync import SyncToAsync
    from django.db import connections

    executor = SyncToAsync.single_thread_executor
    executor.submit(connections.close_all).result(timeout=30)
