"""How long a web request may run, read by both gunicorn (``gunicorn.conf.py``) and Django.

One place, so the server's timeout and the API's documented ``?wait=true`` limit agree:
- ``WAIT_LIMIT_SECONDS``: the longest a ``?wait=true`` checkpoint runs in a request (its
  deadline, ``OPENSQUILLA_CHECKPOINT_TIMEOUT``);
- ``WEB_TIMEOUT_SECONDS``: gunicorn's worker timeout, ``WEB_TIMEOUT`` or the wait limit plus a
  margin, so a waiting call answers before gunicorn would kill it;
- ``ABANDONED_REQUEST_SECONDS``: a request older than the server timeout is dead (gunicorn
  killed its worker), so an Idempotency-Key it still holds is freed after this.
Plain environment reads (after the embedded default's ``.env``, as settings read it): gunicorn
loads this before Django is set up.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from pathlib import Path

from .runtime import load_env_file

load_env_file(Path(__file__).resolve().parent.parent)

MARGIN_SECONDS = 30

WAIT_LIMIT_SECONDS = float(os.environ.get("OPENSQUILLA_CHECKPOINT_TIMEOUT", "120"))
WEB_TIMEOUT_SECONDS = int(
    os.environ.get("WEB_TIMEOUT") or math.ceil(WAIT_LIMIT_SECONDS) + MARGIN_SECONDS
)
ABANDONED_REQUEST_SECONDS = WEB_TIMEOUT_SECONDS + 5

# Unix socket paths are limited to ~107 bytes; past this a short digest names the bind.
_SOCKET_PATH_MAX = 100


def control_socket_path(run_dir: Path, binds: list[str]) -> Path:
    """gunicorn's control socket for an instance serving ``binds``: two instances on one host
    cannot share an address, so naming the socket after it keeps theirs apart."""
    name = re.sub(r"[^A-Za-z0-9.]+", "-", "_".join(binds)).strip("-") or "default"
    path = run_dir / f"gunicorn-{name}.ctl"
    if len(str(path)) > _SOCKET_PATH_MAX:
        path = run_dir / f"gunicorn-{hashlib.sha256(name.encode()).hexdigest()[:12]}.ctl"
    return path
