"""``manage.py run_mirror``: the Procfile's mirror process (docs/MIRROR.md).

Follows ``OPENSQUILLA_SOURCE_DB`` (files from ``OPENSQUILLA_SOURCE_WORKSPACE``) like
``import_opensquilla --follow``. Unset, it says so once and idles: honcho stops every process
when one exits, so an unconfigured mirror must not end ``make run``.
"""

from __future__ import annotations

import logging
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from receipts_app.management import cli
from receipts_app.mirror.follower import build_follower, stop_on_signals

log = logging.getLogger("receipts_app.mirror")


class Command(BaseCommand):
    help = "Follow OPENSQUILLA_SOURCE_DB live (idles with a message when it is not set)."

    def handle(self, *args, **options):
        source = getattr(settings, "OPENSQUILLA_SOURCE_DB", None)
        with stop_on_signals() as stop:
            if not source:
                log.info(
                    "mirror: off. Set OPENSQUILLA_SOURCE_DB to a gateway's "
                    "<state_dir>/sessions.db (and OPENSQUILLA_SOURCE_WORKSPACE to its workspace) "
                    "to follow it; see docs/MIRROR.md"
                )
                stop.wait()
                return
            workspace = getattr(settings, "OPENSQUILLA_SOURCE_WORKSPACE", None)
            with cli.cli_errors():
                follower = build_follower(
                    db_path=Path(source), workspace=Path(workspace) if workspace else None
                )
            follower.run(stop)
