"""``manage.py verify_checkpoints [--gateway NAME] [--agent ID] [--full] [--rate B] [--json]``:
verify a gateway's checkpoint files now (receipts_app.scrub), on the host that holds them.

Runs one whole cycle in this process (files unchanged since their last full read cost a stat;
``--full`` reads every one) and exits 1 when any checkpoint file is missing or damaged (each
is printed), 0 when every one is whole. Errors (a gateway this host does not serve, a bad
name) exit 1 with one line, like every command.
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from receipts_app.management import cli
from receipts_app.scrub import scrub_checkpoints
from sessions_app.gateways import MisroutedWork, served_gateway
from sessions_app.keys import normalize_agent_id


class Command(BaseCommand):
    help = (
        "Verify every saved checkpoint of a gateway (default: the one this host serves, "
        "OPENSQUILLA_GATEWAY) now: the file exists, hashes to what its receipt records and "
        "carries the receipt's coverage. Exit 1 when any is missing or damaged."
    )

    def add_arguments(self, parser):
        parser.add_argument("--gateway", default=None, help="gateway name (default: this host's)")
        parser.add_argument("--agent", default=None, help="only this agent's checkpoints")
        parser.add_argument(
            "--full", action="store_true", help="read every file in full, changed or not"
        )
        parser.add_argument(
            "--rate",
            type=float,
            default=None,
            help="read at most this many bytes/s (default OPENSQUILLA_SCRUB_READ_BYTES_PER_SECOND; "
            "0: unthrottled)",
        )
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args, **options):
        gateway = options["gateway"] or served_gateway()
        agent = options["agent"]
        if agent is not None and not agent.strip():
            raise CommandError("--agent must not be empty")
        if options["rate"] is not None and options["rate"] < 0:
            raise CommandError("--rate must be 0 or more")
        try:
            report = cli.call(
                scrub_checkpoints,
                gateway,
                normalize_agent_id(agent) if agent else None,
                force=True,
                full=True if options["full"] else None,
                seconds=0,
                rate=options["rate"],
            )
        except MisroutedWork as exc:
            raise CommandError(cli.one_line(exc)) from exc
        if options["json"]:
            self.stdout.write(json.dumps(report.to_dict(), indent=2, sort_keys=True))
        else:
            self.stdout.write(
                f"gateway {report.gateway}{' agent ' + report.agent if report.agent else ''}: "
                f"{report.checked} checkpoints checked, {report.files_read} read in full "
                f"({report.bytes_read} bytes), {report.stat_only} unchanged; {report.ok} whole, "
                f"{report.missing} missing, {report.damaged} damaged"
            )
            for unsafe in report.unsafe:
                self.stdout.write(
                    f"  {unsafe['receipt_id']}  {unsafe['outcome']}  {unsafe['detail']}"
                )
        if report.found_unsafe:
            raise SystemExit(1)
