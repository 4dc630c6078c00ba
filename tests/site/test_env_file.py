"""``.env`` gives ``manage.py`` by hand the settings ``make run`` uses; settings touch no disk."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRINT_WORKSPACE = (
    "from django.conf import settings; print(settings.OPENSQUILLA_CHECKPOINT_WORKSPACE)"
)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENSQUILLA_", "DATABASE_", "CELERY_", "PYTEST_"))
    }
    return {**env, "OPENSQUILLA_VAR_DIR": str(tmp_path / "var"), **extra}


def _manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_manage_py_by_hand_reads_the_env_file_and_real_variables_win(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text(f"OPENSQUILLA_CHECKPOINT_WORKSPACE={tmp_path / 'from-file'}\n")
    env = _env(tmp_path, OPENSQUILLA_ENV_FILE=str(env_file))

    result = _manage(env, "shell", "--no-imports", "-c", PRINT_WORKSPACE)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(tmp_path / "from-file")

    env["OPENSQUILLA_CHECKPOINT_WORKSPACE"] = str(tmp_path / "from-environment")
    result = _manage(env, "shell", "--no-imports", "-c", PRINT_WORKSPACE)
    assert result.stdout.strip() == str(tmp_path / "from-environment")

    # Without a file (or with it turned off) the workspace stays unconfigured.
    result = _manage(
        _env(tmp_path, OPENSQUILLA_ENV_FILE=""), "shell", "--no-imports", "-c", PRINT_WORKSPACE
    )
    assert result.stdout.strip() == "None"


def test_importing_settings_creates_no_directory_but_manage_py_does(tmp_path):
    env = _env(
        tmp_path, OPENSQUILLA_ENV_FILE="", DJANGO_SETTINGS_MODULE="opensquilla_site.settings"
    )
    code = (
        "import django; django.setup(); from django.conf import settings; print(settings.VAR_DIR)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "var").exists()

    result = _manage(env, "check")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "var" / "staticfiles").is_dir()  # the broker file's folder is var/ itself
