"""Beat keeps its schedule under ``OPENSQUILLA_VAR_DIR``, wherever it is started from.

The Procfile's beat once wrote ``var/celerybeat-schedule`` relative to its working directory:
with ``./var`` missing (or the var dir moved by the setting) it crash-looped. This runs the
Procfile's own beat command line from a folder with no ``var/`` in it and a var dir that does not
exist yet, and waits for the schedule to appear there.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.worker

REPO_ROOT = Path(__file__).resolve().parents[2]


def procfile_beat_command() -> list[str]:
    line = next(
        line
        for line in (REPO_ROOT / "Procfile").read_text().splitlines()
        if line.startswith("beat:")
    )
    # The part gentle_stop supervises: the celery command itself, in this venv.
    command = shlex.split(line.split("--restart beat", 1)[1])
    bin_dir = Path(sys.executable).parent
    return [str(bin_dir / Path(arg).name) if arg.startswith(".venv/") else arg for arg in command]


def test_beat_writes_its_schedule_under_the_var_dir_setting(tmp_path):
    var_dir = tmp_path / "not-yet" / "var"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "DJANGO_SETTINGS_MODULE": "opensquilla_site.settings",
        "OPENSQUILLA_ENV_FILE": "",
        "OPENSQUILLA_VAR_DIR": str(var_dir),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'beat.sqlite3'}",
        "CELERY_BROKER_URL": f"sqlite:///{tmp_path / 'broker.sqlite3'}",
        "CELERY_SKIP_CHECKS": "1",
    }
    log = tmp_path / "beat.log"
    with log.open("wb") as out:
        process = subprocess.Popen(  # noqa: S603 - the Procfile's own argv, our venv
            procfile_beat_command(),
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while not list(var_dir.glob("celerybeat-schedule*")):
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
    assert not (tmp_path / "var").exists()
