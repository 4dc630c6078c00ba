"""Shared fixtures, the rule that CI may not skip a service-backed test, and parallel runs.

``.ci/run`` sets ``OPENSQUILLA_REQUIRE_SERVICES=1``. Then a test marked ``postgres``,
``redis``, ``browser``, ``worker`` or ``reference`` (the opensquilla 0.3.0 venv that
``bench/reference_venv.sh`` builds) that skips is reported as a failure.

Parallel runs (pytest-xdist, ``make pytest``: ``-n 2 --dist loadgroup``). Each xdist worker
is its own process, so module-level state is already its own. What processes share, and how
the suite keeps workers apart:
- the test database: pytest-django suffixes its name per worker (``test_<db>_gw0``; on
  SQLite the settings already put the pid in the file name), so each worker has its own;
- the cache (django-ratelimit's counters): the file cache lives in a folder per worker and
  every key carries the worker's prefix (``KEY_PREFIX``). Never ``cache.clear()`` in a test:
  on Redis that is ``FLUSHDB``, which also empties the broker's queues under every other
  worker's Celery worker; ``clear_test_cache()`` removes this worker's keys only;
- the broker and Redis: every test that consumes or counts messages uses a queue name of its
  own (``unique_name()``; the worker fixtures' ``celery_queue``), never the default ``celery``
  queue and never a fixed Redis database or key;
- ports: bind port 0 (as the live server and the gunicorn tests do), never a fixed one;
- files: write under ``tmp_path`` (per test), or ``worker_var_dir()`` for a per-worker folder,
  never a fixed path under ``var/``;
- the two cores: tests that start real Celery workers, Chromium or a bench script (markers
  ``worker``, ``browser``, ``soak``, ``bench``) share one xdist group (``SERIAL_GROUP``), so at most one of them runs
  at a time; ``make pytest`` runs the browser tests in a second, serial pass (Playwright's sync
  API leaves an event loop in its thread, which later async tests cannot share);
- node ids: xdist finds a test by its node id, so every item needs its own (parametrize gives
  them; items that share one, as schemathesis's per-operation cases do, are renamed below).
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
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

# --- parallel runs (see the module docstring) ------------------------------------------------
# "gw0", "gw1", … under pytest-xdist (set before settings are read); "" in a serial run.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
# Tests that start real processes (Celery workers, Chromium, soak loads) run one at a time.
SERIAL_MARKERS = ("worker", "browser", "soak", "bench")
SERIAL_GROUP = "real-processes"


def worker_tag() -> str:
    """This test process's name: the xdist worker id, or ``main`` in a serial run."""
    return XDIST_WORKER or "main"


def worker_var_dir() -> Path:
    """A folder under var/ that only this test process writes."""
    path = Path(django_settings.VAR_DIR) / "test-workers" / f"{worker_tag()}-{os.getpid()}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def unique_name(prefix: str) -> str:
    """A queue, key or file name no other test or worker uses."""
    return f"{prefix}-{worker_tag()}-{uuid.uuid4().hex[:10]}"


def _isolate_cache() -> None:
    """Give this process its own cache keys (and folder) before anything opens the cache."""
    from asgiref.local import Local
    from django.core.cache import caches

    conf = django_settings.CACHES["default"]
    conf["KEY_PREFIX"] = f"osq-test-{worker_tag()}-{os.getpid()}"
    if conf["BACKEND"].endswith("FileBasedCache"):
        conf["LOCATION"] = str(worker_var_dir() / "cache")
    caches.close_all()
    caches.__dict__.pop("settings", None)  # built lazily from the settings just changed
    caches._connections = Local(thread_critical=caches.thread_critical)


_isolate_cache()


def clear_test_cache() -> None:
    """Empty this process's cache keys only (``cache.clear()`` on Redis flushes the whole
    database the broker shares)."""
    from django.core.cache import cache

    backend = django_settings.CACHES["default"]["BACKEND"]
    if not backend.endswith("RedisCache"):
        cache.clear()
        return
    client = cache._cache.get_client(None, write=True)
    prefix = django_settings.CACHES["default"]["KEY_PREFIX"]
    keys = list(client.scan_iter(match=f"{prefix}:*", count=500))
    if keys:
        client.delete(*keys)


def _set_nodeid(item: pytest.Item, nodeid: str) -> None:
    # pytest ≥ 9 derives ``nodeid`` from ``_id``; xdist 3.8 still writes ``_nodeid``, which
    # pytest 9 ignores (so xdist's own ``loadgroup`` suffix never takes): set what is read.
    if hasattr(item, "_id"):
        from _pytest.nodeid import NodeId

        item._id = NodeId.parse(nodeid)
    else:  # pragma: no cover - pytest < 9
        item._nodeid = nodeid


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Run browser tests last: Playwright's sync API keeps an event loop running in the main
    thread for the rest of the session, which async tests cannot share. Under xdist, the tests
    that start real processes share one group (``--dist loadgroup`` runs it on one worker)."""
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)
    # xdist tells tests apart by node id alone. Schemathesis gives every API operation its own
    # item under the test function's one node id, so under xdist all but one would silently
    # not run: such items get a node id of their own, from their (distinct) names.
    shared = Counter(item.nodeid for item in items)
    for item in items:
        if shared[item.nodeid] > 1:
            _set_nodeid(item, f"{item.nodeid.rsplit('::', 1)[0]}::{item.name}")
    if not config.pluginmanager.hasplugin("xdist"):
        return
    loadgroup = getattr(config.option, "dist", None) == "loadgroup"
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        if mark is None and any(item.get_closest_marker(m) for m in SERIAL_MARKERS):
            item.add_marker(pytest.mark.xdist_group(SERIAL_GROUP))
            mark = item.get_closest_marker("xdist_group")
        if loadgroup and mark is not None and "@" not in item.nodeid.rsplit("]", 1)[-1]:
            # What ``--dist loadgroup`` schedules by: the group after the last "@".
            group = mark.args[0] if mark.args else mark.kwargs.get("name", "default")
            _set_nodeid(item, f"{item.nodeid}@{group}")


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
