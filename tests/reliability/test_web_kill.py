"""The stack ``make run`` starts (the Procfile under honcho): a gunicorn master or a gunicorn
worker killed with SIGKILL, and web answers throughout: no connection refused, no request
failing, none waiting for a boot. The supervisor runs two gunicorn instances on one listening
socket (``opensquilla_site/gentle_stop.py --instances``); ``make soak-embedded`` does the same
under load, for longer.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import pytest

from bench.soak_embedded import Gate, Stack, web_workers
from tests.worker.conftest import supervised_stack, wait_for

pytestmark = pytest.mark.worker


@pytest.fixture
def stack(tmp_path, monkeypatch):
    # Two workers in all: one per instance (the Procfile's default split).
    with supervised_stack(tmp_path, monkeypatch, web_workers=2) as running:
        yield running


class Probes:
    """Clients asking continuously (four threads, a fresh connection each time): every result
    is a status code or the name of the error that replaced it, with how long it took."""

    def __init__(self, stack: Stack, threads: int = 4) -> None:
        self.stack = stack
        # (status code or error name, sent at (epoch s), answered at (epoch s))
        self.results: list[tuple[int | str, float, float]] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.run, daemon=True) for _ in range(threads)]
        self.gate = Gate()  # for a test that must act between requests

    def run(self) -> None:
        http = httpx.Client(
            base_url=f"{self.stack.url}/api/v1",
            headers={"Authorization": f"Bearer {self.stack.token}"},
            timeout=15,
        )
        while not self.stop.is_set():
            with self.gate.request():
                started = time.time()
                try:
                    code: int | str = http.get("/gateways").status_code
                except httpx.HTTPError as exc:
                    code = type(exc).__name__
                self.results.append((code, started, time.time()))
            time.sleep(0.02)

    def __enter__(self) -> Probes:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)


def _instances(stack: Stack) -> list[dict]:
    return list(stack.status("web").get("instances") or [])


def test_a_killed_gunicorn_master_leaves_no_gap(stack):
    assert [i["state"] for i in _instances(stack)] == ["running", "running"]
    with Probes(stack) as probes:
        wait_for(lambda: len(probes.results) >= 20, what="the probes to start")
        killed = stack.kill("web")  # the first instance's master, with requests in flight
        killed_at = time.time()
        wait_for(
            lambda: stack.running("web") and killed not in [i["pid"] for i in _instances(stack)],
            what="the killed instance to be started again",
        )
        # And serving again: requests keep being answered after the restart too.
        count = len(probes.results)
        wait_for(lambda: len(probes.results) >= count + 20, what="answers after the restart")

    codes = {code for code, _, _ in probes.results}
    assert codes == {200}, sorted(str(c) for c in codes)  # none refused, none failed
    record = stack.status("web")
    # Requests sent after the kill were answered before the killed instance was even started
    # again (its backoff, then its boot): by the other instance, not from the backlog later.
    restarted_at = record["instances"][0]["started_at"] / 1000
    assert any(killed_at < sent and answered < restarted_at for _, sent, answered in probes.results)
    assert record["restarts"] == 1
    assert [i["restarts"] for i in record["instances"]] == [1, 0]
    assert "web instance 1 exited with signal SIGKILL" in stack.log_path.read_text()


def test_a_killed_gunicorn_worker_leaves_no_gap(stack):
    with Probes(stack) as probes:
        wait_for(lambda: len(probes.results) >= 20, what="the probes to start")
        before = web_workers(stack)
        assert len(before) == 2
        # A worker's own in-flight request dies with it (its connection is reset), so the
        # kill happens between requests: what must not fail is everything after it.
        with probes.gate.between_requests():
            os.kill(before[0], signal.SIGKILL)
        wait_for(
            lambda: len(web_workers(stack)) == 2 and before[0] not in web_workers(stack),
            what="the master to fork a new worker",
        )
        count = len(probes.results)
        wait_for(lambda: len(probes.results) >= count + 20, what="answers after the respawn")

    codes = {code for code, _, _ in probes.results}
    assert codes == {200}, sorted(str(c) for c in codes)  # none refused, none failed
    assert stack.restarts()["web"] == 0  # the master replaced its worker; nothing restarted
