"""gunicorn settings (loaded from the working directory, as ``make run`` and the Procfile run).

The worker timeout comes from ``opensquilla_site/serving.py``, the same place that bounds the
API's ``?wait=true`` calls; the control socket is named after the bind address under
``var/run/`` (and after the supervisor's instance number, when it runs several on one
socket), so two instances on one host never share one.

Request limits: the request line may be as long as gunicorn allows (8190 bytes, not its
4094 default), so every URL the API's filters accept reaches Django, which answers with the
API's JSON errors; what gunicorn still refuses itself (a longer line, too many or too large
headers, a malformed request) is answered as JSON too (``opensquilla_site/gunicorn_errors.py``).
"""

import math
import os
from pathlib import Path

from opensquilla_site import gunicorn_errors
from opensquilla_site.serving import WEB_TIMEOUT_SECONDS, control_socket_path

bind = [os.environ.get("WEB_BIND", "127.0.0.1:8000")]
# Under the Procfile's supervisor several instances (masters) share one listening socket
# (opensquilla_site/gentle_stop.py --instances): WEB_WORKERS is the total, split between them.
_INSTANCE = os.environ.get("OPENSQUILLA_INSTANCE", "")
_INSTANCES = max(1, int(os.environ.get("OPENSQUILLA_INSTANCES") or "1"))
workers = max(1, math.ceil(int(os.environ.get("WEB_WORKERS", "2")) / _INSTANCES))
timeout = WEB_TIMEOUT_SECONDS
accesslog = "-"
limit_request_line = 8190  # gunicorn's maximum
limit_request_fields = 100
limit_request_field_size = 8190

_VAR_DIR = Path(os.environ.get("OPENSQUILLA_VAR_DIR", Path(__file__).resolve().parent / "var"))


def on_starting(server):
    gunicorn_errors.install()  # before the workers fork: they inherit it
    # Here, not at module level: a --bind on the command line has been applied by now.
    run_dir = _VAR_DIR / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    binds = list(server.cfg.bind) + ([f"instance-{_INSTANCE}"] if _INSTANCE else [])
    server.cfg.set("control_socket", str(control_socket_path(run_dir, binds)))
