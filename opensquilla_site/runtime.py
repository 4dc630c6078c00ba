"""What a process of the embedded default needs before it starts: its ``.env`` and its directories.

Importing settings has no side effect on disk; the processes that write under ``var/`` (every
``manage.py`` command, the WSGI app, the Celery worker and beat, the test suite) call
``ensure_runtime_dirs()`` first.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def load_env_file(base_dir: Path) -> Path | None:
    """Read ``.env`` (or ``$OPENSQUILLA_ENV_FILE``; empty turns it off) into the environment.

    Variables already set in the real environment win over the file. The test suite never
    reads it: tests pin their own settings, and a developer's ``.env`` (written by ``make run``)
    must not change what they check. ``tests/conftest.py`` also turns it off for the
    processes the tests start.
    """
    name = os.environ.get("OPENSQUILLA_ENV_FILE", str(base_dir / ".env"))
    if not name or "pytest" in sys.modules:
        return None
    path = Path(name)
    if not path.is_file():
        return None
    from dotenv import load_dotenv

    load_dotenv(path, override=False)
    return path


def runtime_dirs() -> list[Path]:
    """The directories the configured backends write to and do not create themselves."""
    from django.conf import settings

    from . import embedded_broker

    dirs = [Path(settings.VAR_DIR), Path(settings.STATIC_ROOT)]
    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith("sqlite3") and str(database["NAME"]) != ":memory:":
        dirs.append(Path(str(database["NAME"])).parent)
    if embedded_broker.is_embedded(settings.CELERY_BROKER_URL):
        dirs.append(embedded_broker.database_path(settings.CELERY_BROKER_URL).parent)
    backend = str(settings.CELERY_RESULT_BACKEND or "")
    if backend.startswith("file://"):
        dirs.append(Path(backend.removeprefix("file://")))
    return list(dict.fromkeys(dirs))


def ensure_runtime_dirs() -> None:
    for path in runtime_dirs():
        path.mkdir(parents=True, exist_ok=True)
