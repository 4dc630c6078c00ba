"""``manage.py process stop|start|restart NAME``: one supervised process of this host.

``make run`` and ``make run-edge`` run each Procfile line under ``opensquilla_site.gentle_stop
--restart NAME`` (``web``, ``worker``, ``beat``, ``mirror``). This asks that wrapper to stop,
start or restart its one process while the others keep running, and waits until it says it
was done. Run it on the host whose process it is (an edge process: on its gateway's host).
"""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from opensquilla_site.gentle_stop import REQUESTS, STATUS_FOLDER, RequestError, send_request


class Command(BaseCommand):
    help = (
        "Stop, start or restart one process supervised by `make run` / `make run-edge` on this "
        "host (web, worker, beat, mirror); the others keep running."
    )

    def add_arguments(self, parser):
        parser.add_argument("action", choices=REQUESTS)
        parser.add_argument("name", help="the Procfile name: web, worker, beat or mirror")
        parser.add_argument(
            "--timeout", type=float, default=60.0, help="seconds to wait for it (default 60)"
        )

    def handle(self, *args, **options):
        action, name = options["action"], options["name"]
        folder = settings.VAR_DIR / STATUS_FOLDER
        try:
            status = send_request(name, action, folder=folder, timeout=options["timeout"])
        except RequestError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"{name}: {action} done; now {status.get('state')}, "
            f"{status.get('restarts') or 0} restart(s) in all"
        )
