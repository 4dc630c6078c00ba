"""What ``make run`` prints and how it stops (issue 10, item 9)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from opensquilla_site.management.commands.bootstrap_operator import console_url

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("bind", "url"),
    [
        ("", "http://127.0.0.1:8000/"),
        ("127.0.0.1:9123", "http://127.0.0.1:9123/"),
        ("0.0.0.0:8080", "http://127.0.0.1:8080/"),
        ("example.test:80", "http://example.test:80/"),
    ],
)
def test_console_url_follows_web_bind(bind, url):
    assert console_url(bind) == url


@pytest.mark.django_db
def test_bootstrap_prints_the_address_web_bind_serves(monkeypatch, settings, tmp_path):
    settings.VAR_DIR = tmp_path
    monkeypatch.setenv("WEB_BIND", "127.0.0.1:9123")
    out = StringIO()
    call_command("bootstrap_operator", stdout=out)
    assert "Console login: http://127.0.0.1:9123/  user: admin" in out.getvalue()


CHILD = """
import os, signal, sys, time
got = []
signal.signal(signal.SIGTERM, lambda *a: got.append(1))
pid = os.fork()
if pid == 0:  # a pool child: must not be signalled by the group stop
    signal.signal(signal.SIGTERM, lambda *a: open(sys.argv[1] + ".child", "w").write("term"))
    time.sleep(30)
    os._exit(0)
open(sys.argv[1], "w").write("ready")
while not got:
    time.sleep(0.05)
os.kill(pid, signal.SIGKILL)
open(sys.argv[1], "w").write(f"stopped after {len(got)} SIGTERM")
"""


def test_gentle_stop_signals_only_the_main_process(tmp_path):
    marker = tmp_path / "state"
    wrapper = subprocess.Popen(  # noqa: S603 - our own interpreter and module
        [
            sys.executable,
            "-m",
            "opensquilla_site.gentle_stop",
            sys.executable,
            "-c",
            CHILD,
            str(marker),
        ],
        cwd=REPO,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    deadline = time.monotonic() + 30
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(wrapper.pid, signal.SIGINT)  # what Ctrl-C (or honcho's stop) does to the group
    assert wrapper.wait(timeout=30) == 0  # stopped as asked: a clean exit
    assert marker.read_text() == "stopped after 1 SIGTERM"
    assert not (tmp_path / "state.child").exists()  # the forked child never saw a signal


CRASHING = """
import os, signal, sys, time
runs = open(sys.argv[1], "a+")
runs.write("run\\n")
runs.close()
if open(sys.argv[1]).read().count("run") == 1:
    os.kill(os.getpid(), signal.SIGKILL)  # the first run dies as kill -9 would end it
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
time.sleep(60)
"""


def test_gentle_stop_restarts_a_process_that_dies_and_records_it(tmp_path):
    import json

    runs = tmp_path / "runs"
    wrapper = subprocess.Popen(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "opensquilla_site.gentle_stop", "--restart", "worker"]
        + [sys.executable, "-c", CRASHING, str(runs)],
        cwd=REPO,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "OPENSQUILLA_VAR_DIR": str(tmp_path)},
        stderr=subprocess.PIPE,
    )
    status_file = tmp_path / "run" / "processes" / "worker.json"

    def status() -> dict:
        try:
            return json.loads(status_file.read_text())
        except (OSError, ValueError):
            return {}

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (
        runs.exists() and runs.read_text().count("run") == 2 and status().get("state") == "running"
    ):
        time.sleep(0.05)
    assert wrapper.poll() is None  # the wrapper (what honcho sees) never exited
    record = status()
    assert record["state"] == "running" and record["restarts"] == 1
    assert record["last_exit"]["text"] == "signal SIGKILL"

    os.killpg(wrapper.pid, signal.SIGINT)  # Ctrl-C still stops it, and it stays stopped
    assert wrapper.wait(timeout=30) == 0
    assert "worker exited with signal SIGKILL" in wrapper.stderr.read().decode()
    assert status()["state"] == "stopped"
    assert runs.read_text().count("run") == 2


ONE_ANSWER = """
import os, socket
listener = socket.socket(fileno=3)  # handed over as systemd's socket activation does
assert os.environ["LISTEN_FDS"] == "1" and os.environ["LISTEN_PID"] == str(os.getpid())
connection, _ = listener.accept()
connection.sendall(b"answered by %d" % os.getpid())
connection.close()
os._exit(1)  # crashes after every answer
"""


def test_gentle_stop_keeps_the_listening_socket_so_a_restart_refuses_no_connection(tmp_path):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    wrapper = subprocess.Popen(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "opensquilla_site.gentle_stop", "--restart", "web"]
        + ["--listen", f"127.0.0.1:{port}", sys.executable, "-c", ONE_ANSWER],
        cwd=REPO,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "OPENSQUILLA_VAR_DIR": str(tmp_path)},
    )
    try:
        deadline = time.monotonic() + 30
        while True:  # until the wrapper has opened the socket
            try:
                first = socket.create_connection(("127.0.0.1", port), timeout=30)
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline, "the wrapper never listened"
                time.sleep(0.05)
        with first:
            answers = [first.recv(100).decode()]
        for _ in range(2):  # each of these arrives while the server is down, restarting
            with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
                answers.append(client.recv(100).decode())
        assert len(set(answers)) == 3 and all(a.startswith("answered by") for a in answers)
        # Stop it while it waits to start a fourth (a stop racing the child's own crash would
        # rightly report the crash's exit code).
        status_file = tmp_path / "run" / "processes" / "web.json"
        while '"restarts": 3' not in status_file.read_text():
            assert time.monotonic() < deadline + 30, status_file.read_text()
            time.sleep(0.05)
    finally:
        os.killpg(wrapper.pid, signal.SIGINT)
    assert wrapper.wait(timeout=30) == 0


SERVE_FOREVER = """
import os, signal, socket, sys
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
listener = socket.socket(fileno=3)
while True:
    connection, _ = listener.accept()
    connection.sendall(b"instance %s of %s" % (
        os.environ["OPENSQUILLA_INSTANCE"].encode(), os.environ["OPENSQUILLA_INSTANCES"].encode()
    ))
    connection.close()
"""


def test_gentle_stop_runs_instances_on_one_socket_and_restarts_each_on_its_own(tmp_path):
    import json
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    wrapper = subprocess.Popen(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "opensquilla_site.gentle_stop", "--restart", "web"]
        + ["--instances", "2", "--listen", f"127.0.0.1:{port}"]
        + [sys.executable, "-c", SERVE_FOREVER],
        cwd=REPO,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "OPENSQUILLA_VAR_DIR": str(tmp_path)},
    )
    status_file = tmp_path / "run" / "processes" / "web.json"

    def status() -> dict:
        try:
            return json.loads(status_file.read_text())
        except (OSError, ValueError):
            return {}

    def ask() -> str:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
            return client.recv(100).decode()

    try:
        deadline = time.monotonic() + 30
        while status().get("state") != "running":
            assert time.monotonic() < deadline, status()
            time.sleep(0.05)
        first = status()
        assert [i["number"] for i in first["instances"]] == [1, 2]
        answers = {ask() for _ in range(40)}
        assert answers <= {"instance 1 of 2", "instance 2 of 2"}
        os.kill(first["instances"][0]["pid"], signal.SIGKILL)
        # While instance 1 waits for its restart, instance 2 answers every connection.
        while status().get("instances", [{}])[0].get("state") != "restarting":
            assert time.monotonic() < deadline + 30, status()
            time.sleep(0.02)
        assert ask() == "instance 2 of 2"
        while status().get("state") != "running":
            assert time.monotonic() < deadline + 60, status()
            time.sleep(0.05)
        record = status()
        assert record["restarts"] == 1
        assert [i["restarts"] for i in record["instances"]] == [1, 0]
        assert record["instances"][1]["pid"] == first["instances"][1]["pid"]  # untouched
        assert record["last_exit"]["text"] == "signal SIGKILL"
    finally:
        os.killpg(wrapper.pid, signal.SIGINT)
    assert wrapper.wait(timeout=30) == 0
    assert status()["state"] == "stopped"


LONG_RUNNING = """
import os, signal, sys, time
with open(sys.argv[1], "a") as runs:
    runs.write(f"run as {os.environ.get('OPENSQUILLA_SUPERVISED_AS')}\\n")
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))  # a warm shutdown
while True:
    time.sleep(0.05)
"""


def test_one_supervised_process_is_stopped_started_and_restarted_by_one_command(tmp_path, settings):
    """``manage.py process stop|start|restart NAME``: that process only, and the wrapper
    (what honcho sees, which would stop every process if it exited) keeps running."""
    import json

    from django.core.management.base import CommandError

    settings.VAR_DIR = tmp_path
    runs = tmp_path / "runs"
    wrapper = subprocess.Popen(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "opensquilla_site.gentle_stop", "--restart", "worker"]
        + [sys.executable, "-c", LONG_RUNNING, str(runs)],
        cwd=REPO,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "OPENSQUILLA_VAR_DIR": str(tmp_path)},
        stderr=subprocess.PIPE,
    )
    status_file = tmp_path / "run" / "processes" / "worker.json"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (runs.exists() and status_file.exists()):
            time.sleep(0.05)

        def process(action: str, name: str = "worker") -> str:
            out = StringIO()
            call_command("process", action, name, "--timeout", "30", stdout=out)
            return out.getvalue()

        def starts(count: int) -> bool:  # the command reports a start before it prints
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and runs.read_text().count("run") < count:
                time.sleep(0.05)
            return runs.read_text().splitlines() == ["run as worker"] * count

        assert "restart done; now running, 1 restart(s)" in process("restart")
        record = json.loads(status_file.read_text())
        assert record["last_exit"]["text"] == "restarted on request"
        assert starts(2)

        assert "stop done; now stopped" in process("stop")
        assert wrapper.poll() is None  # the set goes on without it
        assert json.loads(status_file.read_text())["held"] is True
        assert "start done; now running" in process("start")
        assert starts(3)

        with pytest.raises(CommandError, match="no running supervisor of 'beat'.*worker"):
            process("restart", "beat")
    finally:
        os.killpg(wrapper.pid, signal.SIGINT)
        assert wrapper.wait(timeout=30) == 0
