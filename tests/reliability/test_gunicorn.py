"""A real gunicorn started the way the Procfile starts it (``--config gunicorn.conf.py``).

- Two instances on one host each get their own control socket; stopping one leaves the
  other's in place.
- gunicorn's worker timeout is derived from the API's ``?wait=true`` limit, so a waiting call
  answers before the server kills it.
- A request the server does kill (its timeout set below the wait on purpose) frees its
  Idempotency-Key: the retry runs instead of answering ``idempotency_in_progress`` for ages.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from opensquilla_site.models import IdempotentRequest
from opensquilla_site.serving import control_socket_path
from opensquilla_site.tokens import create_api_token
from receipts_app.models import MemoryDurableReceipt
from tests.factories import make_session, make_user
from tests.reliability.test_faults import LedgerWriteLock
from tests.worker.conftest import REPO_ROOT, wait_for, worker_database_url

TX = pytest.mark.django_db(transaction=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    bind: str
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://{self.bind}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=15)


@pytest.fixture
def start_gunicorn(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    started: list[Server] = []
    database_url = worker_database_url()
    var_dir = tmp_path / "var"

    def start(**env_overrides: str) -> Server:
        port = _free_port()
        env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "OPENSQUILLA_VAR_DIR": str(var_dir),
            "WEB_BIND": f"127.0.0.1:{port}",
            "WEB_WORKERS": "1",
            **env_overrides,
        }
        env.pop("CELERY_TASK_ALWAYS_EAGER", None)
        log_path = tmp_path / f"gunicorn-{len(started) + 1}.log"
        gunicorn = Path(sys.executable).parent / "gunicorn"
        process = subprocess.Popen(  # noqa: S603 - fixed argv, our own venv
            [str(gunicorn), "opensquilla_site.wsgi", "--config", "gunicorn.conf.py"],
            cwd=REPO_ROOT,
            env=env,
            stdout=log_path.open("wb"),
            stderr=subprocess.STDOUT,
        )
        server = Server(process, f"127.0.0.1:{port}", log_path)
        started.append(server)

        def ready() -> bool:
            if process.poll() is not None:
                pytest.fail(f"gunicorn exited:\n{server.log()}")
            try:
                return httpx.get(f"{server.url}/accounts/login/", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(ready, what="gunicorn to answer")
        return server

    yield start
    for server in started:
        server.stop()


def _sockets(run_dir: Path) -> list[Path]:
    if not run_dir.is_dir():
        return []
    return sorted(p for p in run_dir.iterdir() if stat.S_ISSOCK(p.stat().st_mode))


@TX
def test_two_instances_on_one_host_keep_their_own_control_socket(start_gunicorn, tmp_path):
    run_dir = tmp_path / "var" / "run"
    first = start_gunicorn()
    second = start_gunicorn()
    first_socket = control_socket_path(run_dir, [first.bind])
    second_socket = control_socket_path(run_dir, [second.bind])
    wait_for(
        lambda: _sockets(run_dir) == sorted([first_socket, second_socket]),
        what="each instance's own control socket",
    )
    first.stop()
    # The survivor's socket is untouched by the other's shutdown, and it still serves.
    assert _sockets(run_dir) == [second_socket]
    assert httpx.get(f"{second.url}/accounts/login/", timeout=10).status_code == 200


def _print_config(**env: str) -> str:
    gunicorn = Path(sys.executable).parent / "gunicorn"
    result = subprocess.run(  # noqa: S603 - fixed argv, our own venv
        [str(gunicorn), "opensquilla_site.wsgi", "--config", "gunicorn.conf.py", "--print-config"],
        cwd=REPO_ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout


def _timeout(config: str) -> int:
    line = next(line for line in config.splitlines() if line.startswith("timeout "))
    return int(line.split("=")[1])


@pytest.mark.parametrize("wait_limit", ["120", "300"])
def test_the_server_timeout_outlasts_the_documented_wait_limit(wait_limit):
    config = _print_config(OPENSQUILLA_CHECKPOINT_TIMEOUT=wait_limit, WEB_TIMEOUT="")
    assert _timeout(config) > float(wait_limit)


@pytest.mark.postgres
@TX
def test_a_request_the_server_kills_frees_its_idempotency_key(
    require_postgres, start_gunicorn, tmp_path
):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    user = make_user("ops", "operator")
    _token, plaintext = create_api_token(user=user, name="kill", scope="operate")
    session = make_session(f"agent:main:webchat:kill-{uuid.uuid4().hex[:6]}", messages=2)
    # The server's timeout below the checkpoint's own deadline, on purpose: the request is
    # killed mid-wait, as a too-long wait was before the two were derived from one place.
    server = start_gunicorn(
        WEB_TIMEOUT="6",
        OPENSQUILLA_CHECKPOINT_TIMEOUT="60",
        OPENSQUILLA_CHECKPOINT_WORKSPACE=str(workspace),
    )
    url = f"{server.url}/api/v1/sessions/{session.session_key}/checkpoints?wait=true"
    headers = {"Authorization": f"Bearer {plaintext}", "Idempotency-Key": "killed-once"}

    with LedgerWriteLock():  # the receipt write blocks until gunicorn kills the worker
        try:
            first = httpx.post(url, json={}, headers=headers, timeout=60)
            killed_status: int | None = first.status_code
        except httpx.HTTPError:
            killed_status = None  # the connection closed with the worker
    assert killed_status != 200
    assert not MemoryDurableReceipt.objects.filter(session_key=session.session_key).exists()

    def retried() -> httpx.Response | None:
        response = httpx.post(url, json={}, headers=headers, timeout=60)
        if response.status_code == 409:
            assert response.json()["code"] == "idempotency_in_progress"
            return None
        return response

    # Freed once the reservation is older than the server's timeout, not after 10 minutes.
    answer = wait_for(retried, what="the killed request's key to be freed", timeout=90)
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "checkpoint_saved"
    assert IdempotentRequest.objects.get(key="killed-once").status_code == 200
