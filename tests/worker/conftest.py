"""Fixtures that run a REAL Celery worker against the test database.

The worker is a subprocess (``celery worker --pool=solo``) with the test process's broker and
the test database (SQLite file or PostgreSQL ``test_*``), a private queue per test, and
workspaces in ``tmp_path``. Tests push work through services or ``.delay`` and poll the
ledger for the end state with a bounded wait; they never assert on time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.conf import settings as django_settings
from django.db import connection

from tests.worker.celery_app import TEST_QUEUE_ENV, app, route_to

REPO_ROOT = Path(__file__).resolve().parents[2]
# The embedded default (a SQLite file under the shared VAR_DIR) unless CI names a broker.
BROKER_URL = os.environ.get("CELERY_BROKER_URL") or django_settings.CELERY_BROKER_URL
BROKER_IS_REDIS = BROKER_URL.startswith(("redis://", "rediss://"))
WORKER_READY_TIMEOUT = 60.0
WAIT_TIMEOUT = 60.0


def service_marks() -> list[pytest.MarkDecorator]:
    """``worker`` always; ``redis`` too when the broker is Redis (CI), so a skip fails CI."""
    marks = [pytest.mark.worker]
    if BROKER_IS_REDIS:
        marks.append(pytest.mark.redis)
    return marks


@contextmanager
def supervised_stack(tmp_path: Path, monkeypatch: Any, *, web_workers: int) -> Iterator[Any]:
    """The process set ``make run`` starts (bench/soak_embedded.py's ``Stack``: the Procfile
    under honcho), ready to answer, with ``web_workers`` gunicorn workers in all and one pool
    child; stopped on exit."""
    from bench.soak_embedded import Stack

    monkeypatch.setenv("WEB_WORKERS", str(web_workers))
    monkeypatch.setenv("WORKER_CONCURRENCY", "1")
    running = Stack(tmp_path)
    running.prepare()
    running.start()
    try:
        running.wait_ready()
        yield running
    finally:
        running.stop()


def wait_for(predicate: Callable[[], Any], *, what: str, timeout: float = WAIT_TIMEOUT) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail with ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


# --- the broker ----------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _broker_reachable() -> None:
    if not BROKER_IS_REDIS:
        return
    import redis

    try:
        redis.Redis.from_url(BROKER_URL, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        pytest.skip(f"Redis broker {BROKER_URL} unreachable: {exc}")


@pytest.fixture
def celery_queue() -> Iterator[str]:
    """A queue only this test's worker consumes; the test process sends to it too."""
    queue = f"osq-test-{uuid.uuid4().hex[:12]}"
    saved = {
        "task_default_queue": app.conf.task_default_queue,
        "task_routes": app.conf.task_routes,
        "task_always_eager": app.conf.task_always_eager,
    }
    app.conf.task_always_eager = False
    route_to(queue)
    yield queue
    app.conf.update(saved)


# --- the database the worker connects to ----------------------------------------------------------


def worker_database_url() -> str:
    """A DATABASE_URL naming the database this test process is using right now."""
    conf = connection.settings_dict
    if conf["ENGINE"].endswith("sqlite3"):
        name = str(conf["NAME"])
        if name == ":memory:" or "mode=memory" in name:
            pytest.skip("worker tests need a file-backed SQLite test database")
        return f"sqlite:///{Path(name).resolve()}"
    if conf["ENGINE"].endswith("postgresql"):
        user = quote(str(conf.get("USER") or ""), safe="")
        password = quote(str(conf.get("PASSWORD") or ""), safe="")
        auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
        host = conf.get("HOST") or "127.0.0.1"
        port = f":{conf['PORT']}" if conf.get("PORT") else ""
        return f"postgres://{auth}{host}{port}/{quote(str(conf['NAME']), safe='')}"
    pytest.skip(f"no worker database URL for engine {conf['ENGINE']}")


# --- workspaces shared by the test process and the worker -----------------------------------------


@dataclass
class Workspaces:
    checkpoint: Path
    memory: Path


@pytest.fixture
def shared_workspaces(tmp_path: Path, settings: Any) -> Workspaces:
    spaces = Workspaces(checkpoint=tmp_path / "checkpoints", memory=tmp_path / "memory-ws")
    spaces.checkpoint.mkdir()
    spaces.memory.mkdir()
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(spaces.checkpoint)
    settings.OPENSQUILLA_MEMORY_WORKSPACE = str(spaces.memory)
    settings.OPENSQUILLA_FLUSH_PROVIDER = "none"
    return spaces


# --- a local OpenAI-compatible model -------------------------------------------------------------


GOOD_ANSWER = {
    "slug": "deploy-habits",
    "candidates": [
        {
            "kind": "fact",
            "render_text": "The team deploys on Fridays.",
            "source_message": 1,
            "source_date": "2026-05-01",
            "confidence": 0.9,
        }
    ],
}


@dataclass
class StubLLM:
    """``/v1/chat/completions`` on 127.0.0.1 answering valid candidates, or hanging."""

    base_url: str = ""
    mode: str = "good"  # "good" or "hang"
    requests: int = 0
    release: threading.Event = field(default_factory=threading.Event)
    received: threading.Event = field(default_factory=threading.Event)


def _handler_for(stub: StubLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            stub.requests += 1
            stub.received.set()
            if stub.mode == "hang":
                # Keep the worker mid-task until the test kills it (or the test ends).
                stub.release.wait(timeout=120)
            body = json.dumps(
                {
                    "model": "stub-model",
                    "choices": [
                        {"message": {"role": "assistant", "content": json.dumps(GOOD_ANSWER)}}
                    ],
                }
            ).encode()
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:
                pass  # the worker that asked was killed

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            return

    return Handler


@pytest.fixture
def stub_llm() -> Iterator[StubLLM]:
    stub = StubLLM()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(stub))
    server.daemon_threads = True
    stub.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield stub
    stub.release.set()
    server.shutdown()
    server.server_close()


def stub_provider_env(stub: StubLLM) -> dict[str, str]:
    return {
        "OPENSQUILLA_FLUSH_PROVIDER": "openai",
        "OPENSQUILLA_FLUSH_BASE_URL": stub.base_url,
        "OPENSQUILLA_FLUSH_MODEL": "stub-model",
        "OPENSQUILLA_FLUSH_API_KEY": "test-key",
    }


# --- the worker ----------------------------------------------------------------------------------


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def kill_hard(self) -> None:
        """SIGKILL, as a crashed machine or the OOM killer would: no cleanup, no acks."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(timeout=15)


@pytest.fixture
def start_worker(
    tmp_path: Path, celery_queue: str, shared_workspaces: Workspaces
) -> Iterator[Callable[..., Worker]]:
    """Factory: ``start_worker(**env)`` starts a worker and waits until it is ready;
    ``queues=`` names the queues it consumes (default: this test's queue)."""
    started: list[Worker] = []
    database_url = worker_database_url()

    def start(*, queues: str | None = None, **env_overrides: str) -> Worker:
        env = dict(os.environ)
        env.pop("CELERY_TASK_ALWAYS_EAGER", None)
        env.update(
            {
                "DJANGO_SETTINGS_MODULE": "opensquilla_site.settings",
                "PYTHONPATH": str(REPO_ROOT),
                "DATABASE_URL": database_url,
                "CELERY_BROKER_URL": BROKER_URL,
                "OPENSQUILLA_VAR_DIR": str(django_settings.VAR_DIR),
                "OPENSQUILLA_CHECKPOINT_WORKSPACE": str(shared_workspaces.checkpoint),
                "OPENSQUILLA_MEMORY_WORKSPACE": str(shared_workspaces.memory),
                "OPENSQUILLA_FLUSH_PROVIDER": "none",
                TEST_QUEUE_ENV: celery_queue,
                # System checks belong to the suite's own check run; they only slow the start.
                "CELERY_SKIP_CHECKS": "1",
            }
        )
        env.update(env_overrides)
        log_path = tmp_path / f"worker-{len(started) + 1}.log"
        celery_bin = Path(sys.executable).parent / "celery"
        command = [
            str(celery_bin),
            "-A",
            "tests.worker.celery_app",
            "worker",
            "--pool=solo",
            "--concurrency=1",
            "-Q",
            queues or celery_queue,
            "-n",
            f"{celery_queue}-{len(started) + 1}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel=INFO",
        ]
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(  # noqa: S603 - fixed argv, our own venv
                command,
                cwd=REPO_ROOT,
                env=env,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = Worker(process=process, log_path=log_path)
        started.append(worker)

        def ready() -> bool:
            if process.poll() is not None:
                pytest.fail(f"worker exited with {process.returncode}:\n{worker.log()}")
            return " ready." in worker.log()

        wait_for(ready, what="the Celery worker to be ready", timeout=WORKER_READY_TIMEOUT)
        return worker

    yield start
    for worker in started:
        worker.stop()
