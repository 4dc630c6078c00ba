"""/healthz and /readyz as an orchestrator meets them: no credentials, bounded, honest."""

from __future__ import annotations

import socket

import pytest
from django.db import connections
from django.test import Client

from tests.conftest import is_postgres

pytestmark = pytest.mark.django_db


def _closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_healthz_answers_without_credentials_data_or_queries(django_assert_num_queries):
    with django_assert_num_queries(0):
        response = Client().get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert "no-cache" in response["Cache-Control"]


def test_probes_answer_a_kubelet_probing_by_ip_over_plain_http(settings):
    """The pod IP is not an allowed host and the probe is not HTTPS: still answered."""
    settings.SECURE_SSL_REDIRECT = True
    client = Client(HTTP_HOST="10.1.2.3:8000")
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    # Everything else still gets the host check.
    assert client.get("/accounts/login/").status_code == 400


def test_readyz_is_ready_when_database_and_broker_answer():
    response = Client().get("/readyz")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ready" and body["failed"] == []
    assert body["checks"]["database"]["ok"] and body["checks"]["broker"]["ok"]


@pytest.mark.parametrize("scheme", ["redis", "amqp"])
def test_readyz_names_the_broker_when_it_is_down(settings, scheme):
    settings.CELERY_BROKER_URL = f"{scheme}://guest:secret-pw@127.0.0.1:{_closed_port()}/0"
    settings.OPENSQUILLA_READYZ_TIMEOUT = 3
    response = Client().get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["failed"] == ["broker"]
    assert body["checks"]["database"]["ok"] is True
    assert "unreachable" in body["checks"]["broker"]["detail"]
    assert "secret-pw" not in response.content.decode()  # credentials never echoed


def test_readyz_names_the_database_when_it_is_down(monkeypatch, tmp_path):
    db_settings = connections["default"].settings_dict
    if is_postgres():
        monkeypatch.setitem(db_settings, "PORT", str(_closed_port()))
    else:
        monkeypatch.setitem(db_settings, "NAME", str(tmp_path / "missing-dir" / "db.sqlite3"))
    response = Client().get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["failed"] == ["database"]
    assert body["checks"]["broker"]["ok"] is True


def test_readyz_times_out_a_broker_that_accepts_but_never_answers(settings):
    """A socket that is listening but silent: the probe gives up at the deadline."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
        settings.OPENSQUILLA_READYZ_TIMEOUT = 0.5
        response = Client().get("/readyz")
    assert response.status_code == 503
    assert response.json()["failed"] == ["broker"]
