"""The stack ``make run`` starts (the Procfile under honcho): a worker killed with SIGKILL is
started again while the web server keeps answering, and the work accepted meanwhile is done.
``make soak-embedded`` (bench/soak_embedded.py) does the same for every process, for longer.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.worker.conftest import supervised_stack, wait_for

pytestmark = pytest.mark.worker


@pytest.fixture
def stack(tmp_path, monkeypatch):
    # One web worker and one pool child: the same supervision, a quicker start.
    with supervised_stack(tmp_path, monkeypatch, web_workers=1) as running:
        yield running


def _checkpoint(http: httpx.Client, key: str) -> None:
    assert http.post("/sessions", json={"session_key": key}).status_code == 201
    for role in ("user", "assistant"):
        message = {"role": role, "content": f"{role} says hi"}
        assert http.post(f"/sessions/{key}/messages", json=message).status_code == 201
    assert http.post(f"/sessions/{key}/checkpoints", json={}).status_code == 202


def _saved(http: httpx.Client, key: str) -> bool:
    page = http.get("/receipts", params={"session_key": key, "scope": "checkpoint"}).json()
    return any(item["status"] == "checkpoint_saved" for item in page["items"])


def test_a_killed_worker_comes_back_while_web_answers_throughout(stack):
    http = httpx.Client(
        base_url=f"{stack.url}/api/v1",
        headers={"Authorization": f"Bearer {stack.token}"},
        timeout=30,
    )
    _checkpoint(http, "agent:main:webchat:before-kill")
    wait_for(lambda: _saved(http, "agent:main:webchat:before-kill"), what="the first checkpoint")

    answers: list[int | str] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            try:
                answers.append(httpx.get(f"{stack.url}/healthz", timeout=5).status_code)
            except httpx.HTTPError as exc:
                answers.append(type(exc).__name__)
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    killed = stack.kill("worker")
    # Accepted while no worker runs: the broker holds it for the restarted worker.
    _checkpoint(http, "agent:main:webchat:during-restart")
    wait_for(
        lambda: stack.running("worker") and stack.status("worker").get("pid") != killed,
        what="the worker to be started again",
    )
    wait_for(
        lambda: _saved(http, "agent:main:webchat:during-restart"),
        what="the restarted worker to take the checkpoint accepted meanwhile",
    )
    stop.set()
    watcher.join(timeout=10)

    assert answers and set(answers) == {200}  # every request answered, none refused
    assert stack.restarts() == {"web": 0, "worker": 1, "beat": 0, "mirror": 0}
    assert "worker exited with signal SIGKILL" in stack.log_path.read_text()
