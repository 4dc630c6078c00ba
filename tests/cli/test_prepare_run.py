"""``make run`` (``manage.py prepare_run``) seeds demo data only into a database it created
for the embedded default: never into a fleet's database, nor into one that existed before."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core import management

from receipts_app.management.commands import prepare_run
from receipts_app.models import MemoryDurableReceipt

pytestmark = pytest.mark.django_db


@pytest.fixture
def steps(monkeypatch, settings, tmp_path):
    """The command's steps, with migrate and collectstatic recorded instead of run (the test
    database is migrated already); seed_demo runs for real."""
    settings.VAR_DIR = tmp_path
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(tmp_path / "ws")
    settings.OPENSQUILLA_MEMORY_WORKSPACE = None
    ran: list[str] = []
    real = management.call_command

    def call(name: str, *args, **kwargs):
        ran.append(name)
        if name == "seed_demo":
            return real(name, *args, **kwargs)
        return None

    monkeypatch.setattr(prepare_run, "call_command", call)
    return ran


def prepare() -> str:
    out = StringIO()
    management.call_command("prepare_run", stdout=out)
    return out.getvalue()


def test_a_fresh_embedded_database_gets_the_demo(steps, monkeypatch, tmp_path):
    monkeypatch.setattr(prepare_run, "embedded_database", lambda: tmp_path / "opensquilla.sqlite3")
    out = prepare()
    assert steps == ["migrate", "collectstatic", "seed_demo"]
    assert "demo data:" in out and MemoryDurableReceipt.objects.exists()


def test_an_embedded_database_that_existed_before_is_left_alone(steps, monkeypatch, tmp_path):
    existing = tmp_path / "opensquilla.sqlite3"
    existing.write_bytes(b"")
    monkeypatch.setattr(prepare_run, "embedded_database", lambda: existing)
    out = prepare()
    assert steps == ["migrate", "collectstatic"]
    assert "not seeded (the database existed before this run)" in out
    assert not MemoryDurableReceipt.objects.exists()


def test_a_database_named_by_database_url_is_never_seeded(steps):
    # The test database is not <var>/opensquilla.sqlite3: as a central host's PostgreSQL.
    assert prepare_run.embedded_database() is None
    out = prepare()
    assert steps == ["migrate", "collectstatic"]
    assert "DATABASE_URL names a database this run did not create" in out
    assert not MemoryDurableReceipt.objects.exists()
