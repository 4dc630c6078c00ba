"""Parallel test processes (pytest-xdist) must not undo each other's state.

The cache and the broker share one Redis database in CI; emptying the cache the Django way
(``cache.clear()``, i.e. ``FLUSHDB``) would also drop the messages another worker's Celery
worker is about to consume. ``clear_test_cache()`` removes this process's keys only.
"""

from __future__ import annotations

import os

import pytest
from django.core.cache import cache

from tests.conftest import clear_test_cache, unique_name


@pytest.mark.redis
def test_clearing_the_test_cache_keeps_another_processes_queue_and_keys(settings):
    url = os.environ.get("CELERY_BROKER_URL", "")
    if not url.startswith(("redis://", "rediss://")):
        pytest.skip("needs a Redis broker: set CELERY_BROKER_URL=redis://...")
    import redis

    client = redis.Redis.from_url(url)
    queue = unique_name("osq-other-worker-queue")
    foreign_key = unique_name("osq-other-worker-cache")
    client.rpush(queue, b"a message another worker has not consumed yet")
    client.set(foreign_key, b"1")
    try:
        cache.set("mine", "1")
        clear_test_cache()
        assert cache.get("mine") is None
        assert client.llen(queue) == 1
        assert client.get(foreign_key) == b"1"
    finally:
        client.delete(queue, foreign_key)


def test_unique_names_differ_and_name_this_process():
    first, second = unique_name("osq-q"), unique_name("osq-q")
    assert first != second
    tag = os.environ.get("PYTEST_XDIST_WORKER") or "main"
    assert first.startswith(f"osq-q-{tag}-")
