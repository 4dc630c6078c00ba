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
