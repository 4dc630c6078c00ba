"""Durable and connection-keeping database defaults, and the documented way out of each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
_PROBE = (
    "import django, json; django.setup();"
    "from django.conf import settings; from django.db import connection;"
    "cur = connection.cursor(); cur.execute('PRAGMA synchronous');"
    "print(json.dumps({'synchronous': cur.fetchone()[0],"
    " 'conn_max_age': settings.DATABASES['default']['CONN_MAX_AGE'],"
    " 'health_checks': settings.DATABASES['default']['CONN_HEALTH_CHECKS']}))"
)


def _probe(tmp_path: Path, **env: str) -> dict:
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "DATABASE_CONN_MAX_AGE", "OPENSQUILLA_SQLITE_SYNCHRONOUS"}
    }
    clean.update(
        DJANGO_SETTINGS_MODULE="opensquilla_site.settings",
        DATABASE_URL=f"sqlite:///{tmp_path / 'probe.sqlite3'}",
        **env,
    )
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], cwd=ROOT, env=clean, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_sqlite_commits_are_fully_synced_and_connections_kept_by_default(tmp_path):
    # PRAGMA synchronous: 1 = NORMAL, 2 = FULL.
    assert _probe(tmp_path) == {"synchronous": 2, "conn_max_age": 600, "health_checks": True}


def test_normal_sync_and_closing_connections_are_explicit_choices(tmp_path):
    probed = _probe(tmp_path, OPENSQUILLA_SQLITE_SYNCHRONOUS="normal", DATABASE_CONN_MAX_AGE="0")
    assert (probed["synchronous"], probed["conn_max_age"]) == (1, 0)


def test_an_unknown_synchronous_mode_is_refused(tmp_path):
    env = {**os.environ, "OPENSQUILLA_SQLITE_SYNCHRONOUS": "OFF"}
    env.pop("DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode != 0
    assert "OPENSQUILLA_SQLITE_SYNCHRONOUS must be FULL, NORMAL or EXTRA" in done.stderr


@pytest.mark.django_db
def test_this_test_database_runs_the_configured_sync_mode():
    if connection.vendor != "sqlite":
        pytest.skip("SQLite only")
    with connection.cursor() as cur:
        cur.execute("PRAGMA synchronous")
        assert cur.fetchone()[0] == 2


@pytest.mark.django_db
def test_postgresql_connections_run_without_jit():
    """JIT compilation cost the overview 2.9 s at 5M receipts for a 0.1 s statement."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    with connection.cursor() as cur:
        cur.execute("SHOW jit")
        assert cur.fetchone()[0] == "off"
