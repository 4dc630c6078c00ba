"""``manage.py run_mirror``: the Procfile's mirror process (docs/MIRROR.md).

Follows ``OPENSQUILLA_SOURCE_DB`` (the gateway ``local``, files from
``OPENSQUILLA_SOURCE_WORKSPACE``) and every ``OPENSQUILLA_SOURCES`` entry (each under its own
gateway name), like ``import_opensquilla --follow``: one follower thread per source, so a
source that fails or stands by never holds up another. Unset, it says so once and idles:
honcho stops every process when one exits, so an unconfigured mirror must not end ``make run``.
"""

from __future__ import annotations

import logging
import threading

from django.core.management.base import BaseCommand
from django.db import connection

from receipts_app.management import cli
from receipts_app.mirror.follower import Follower, build_follower, stop_on_signals
from receipts_app.mirror.process import announced
from receipts_app.mirror.sources import configured_sources

log = logging.getLogger("receipts_app.mirror")


class Command(BaseCommand):
    help = (
        "Follow OPENSQUILLA_SOURCE_DB and OPENSQUILLA_SOURCES live, each source under its "
        "gateway name (idles with a message when none is set)."
    )

    def handle(self, *args, **options):
        with stop_on_signals() as stop:
            with cli.cli_errors():
                followers = [
                    build_follower(
                        db_path=source.db_path,
                        workspace=source.workspace,
                        gateway=source.gateway,
                    )
                    for source in configured_sources()
                ]
            with announced([f.gateway for f in followers]):
                self._run(followers, stop)

    def _run(self, followers: list[Follower], stop: threading.Event) -> None:
        if not followers:
            log.info(
                "mirror: off. Set OPENSQUILLA_SOURCE_DB to a gateway's "
                "<state_dir>/sessions.db (and OPENSQUILLA_SOURCE_WORKSPACE to its workspace), "
                "or OPENSQUILLA_SOURCES to several, to follow them; see docs/MIRROR.md"
            )
            stop.wait()
            return
        if len(followers) == 1:
            followers[0].run(stop)
            return
        threads = [
            threading.Thread(target=_run, args=(f, stop), name=f"mirror-{f.gateway}", daemon=True)
            for f in followers
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


def _run(follower: Follower, stop: threading.Event) -> None:
    try:
        follower.run(stop)
    finally:
        connection.close()  # this thread's own database connection
