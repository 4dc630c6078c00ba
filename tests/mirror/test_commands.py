"""The mirror's commands as ``make run`` and an operator start them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

ROOT = Path(__file__).resolve().parents[2]


def test_run_mirror_without_a_source_says_so_and_idles_until_stopped(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENSQUILLA_SOURCE")}
    env.update(
        LOG_LEVEL="INFO",
        OPENSQUILLA_ENV_FILE="",
        DATABASE_URL=f"sqlite:///{tmp_path / 'unused.sqlite3'}",
    )
    process = subprocess.Popen(  # noqa: S603 - fixed argv, our own venv
        [sys.executable, str(ROOT / "manage.py"), "run_mirror"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    lines = []
    while not any("mirror: off" in line for line in lines) and len(lines) < 50:
        lines.append(process.stdout.readline())  # blocks until the next line
    assert any("mirror: off. Set OPENSQUILLA_SOURCE_DB" in line for line in lines), lines
    assert process.poll() is None
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0


@pytest.mark.django_db
def test_interval_without_follow_is_refused():
    with pytest.raises(CommandError, match="--interval only applies with --follow"):
        call_command("import_opensquilla", "/nonexistent/sessions.db", "--interval", "1")


@pytest.mark.django_db
def test_follow_with_a_workspace_but_nowhere_to_copy_files_is_refused(tmp_path, settings):
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = None
    with pytest.raises(CommandError, match="no target workspace"):
        call_command(
            "import_opensquilla",
            str(tmp_path / "sessions.db"),
            "--workspace",
            str(tmp_path),
            "--follow",
        )
