"""``manage.py import_opensquilla PATH_TO_sessions.db [--workspace DIR] [--gateway NAME]
[--follow]``.

One-shot import: docs/IMPORT.md. ``--follow``: the live mirror, docs/MIRROR.md.
"""

from __future__ import annotations

import json
from pathlib import Path

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from receipts_app.audit import acting_as
from receipts_app.importer import import_opensquilla
from receipts_app.management import cli
from receipts_app.mirror.follower import build_follower, stop_on_signals
from receipts_app.mirror.process import announced
from sessions_app.gateways import (
    DEFAULT_GATEWAY,
    GatewayNameError,
    ensure_gateway,
    validate_gateway_name,
    validate_rpc_address,
)
from sessions_app.link_policy import validate_token_env


class Command(BaseCommand):
    help = (
        "Import an OpenSquilla (0.3.0 or later) sessions.db: sessions, transcript entries and "
        "every receipt, plus the checkpoint and raw-fallback files of its workspace. "
        "Idempotent; all or nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("db_path", metavar="PATH_TO_sessions.db", type=Path)
        parser.add_argument(
            "--workspace",
            type=Path,
            default=None,
            help="the OpenSquilla workspace holding memory/.checkpoints and memory/.raw_fallbacks",
        )
        parser.add_argument(
            "--target-workspace",
            type=Path,
            default=None,
            help="where checkpoint files go (default: OPENSQUILLA_CHECKPOINT_WORKSPACE)",
        )
        parser.add_argument(
            "--memory-workspace",
            default=None,
            help="where raw-fallback archives go; may contain {agent} "
            "(default: OPENSQUILLA_MEMORY_WORKSPACE, else the target workspace)",
        )
        parser.add_argument(
            "--gateway",
            default=DEFAULT_GATEWAY,
            metavar="NAME",
            help="the gateway these rows belong to: a slug such as host-2 (default: local); "
            "each OpenSquilla deployment followed into this console gets its own",
        )
        parser.add_argument(
            "--rpc-address",
            default=None,
            metavar="ADDRESS",
            help="also link the gateway: its RPC address (ws://host:port/ws), read on a schedule "
            "(docs/MIRROR.md#gateway-link); its host must be allowed by "
            "OPENSQUILLA_GATEWAY_LINK_HOSTS; its token comes from OPENSQUILLA_GATEWAY_TOKEN_<NAME>",
        )
        parser.add_argument(
            "--rpc-token-env",
            default=None,
            metavar="VARIABLE",
            help="with --rpc-address: the environment variable holding the gateway's token, "
            "named OPENSQUILLA_GATEWAY_TOKEN_* (its name is stored, never the token)",
        )
        parser.add_argument(
            "--follow",
            action="store_true",
            help="keep following the live database after the initial import (docs/MIRROR.md); "
            "stop with SIGTERM or Ctrl-C",
        )
        parser.add_argument(
            "--interval",
            type=float,
            default=None,
            help="with --follow: seconds between polls (default OPENSQUILLA_MIRROR_INTERVAL, 0.5)",
        )
        parser.add_argument("--json", action="store_true", help="print the report as JSON")
        parser.add_argument("--no-progress", action="store_true", help="no progress bar")
        cli.add_actor_argument(parser)

    def handle(self, *args, **options):
        try:
            validate_gateway_name(options["gateway"])
        except GatewayNameError as exc:
            raise CommandError(f"--gateway: {exc}") from exc
        options["link"] = self._link(options)  # checked before any work, applied after it
        if options["follow"]:
            return self._follow(options)
        if options["interval"] is not None:
            raise CommandError("--interval only applies with --follow")
        progress = cli.ProgressBar(cli.raw_stream(self.stderr), enabled=not options["no_progress"])
        try:
            with acting_as(cli.actor_from(options)), cli.cli_errors():
                report = import_opensquilla(
                    db_path=options["db_path"],
                    workspace=options["workspace"],
                    target_workspace=options["target_workspace"],
                    memory_workspace=options["memory_workspace"],
                    progress=progress,
                    gateway=options["gateway"],
                )
        finally:
            progress.close()
        self._apply_link(options)
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict(), indent=2, sort_keys=True))
            return
        for line in report.summary_lines():
            self.stdout.write(line)
        self.stdout.write(
            self.style.SUCCESS("import done")
            if report.changed
            else "nothing to do: already imported"
        )

    def _link(self, options) -> dict[str, str] | None:
        address, token_env = options["rpc_address"], options["rpc_token_env"]
        if address is None:
            if token_env is not None:
                raise CommandError("--rpc-token-env only applies with --rpc-address")
            return None
        link = {"rpc_address": address, "rpc_token_env": token_env or ""}
        try:
            validate_rpc_address(address)
            validate_token_env(link["rpc_token_env"])
        except ValidationError as exc:
            raise CommandError(f"--rpc-address/--rpc-token-env: {' '.join(exc.messages)}") from exc
        return link

    def _apply_link(self, options) -> None:
        if options["link"] is not None:
            ensure_gateway(options["gateway"], **options["link"])
            self.stderr.write(
                f"gateway {options['gateway']} linked at {options['link']['rpc_address']}"
            )

    def _follow(self, options):
        progress = cli.ProgressBar(cli.raw_stream(self.stderr), enabled=not options["no_progress"])
        with cli.cli_errors():
            follower = build_follower(
                db_path=options["db_path"],
                workspace=options["workspace"],
                target_workspace=options["target_workspace"],
                memory_workspace=options["memory_workspace"],
                interval=options["interval"],
                progress=progress,
                gateway=options["gateway"],
            )
        self._apply_link(options)
        self.stderr.write(
            f"following {follower.path} as gateway {follower.gateway} every "
            f"{follower.interval:g}s (Ctrl-C stops)"
        )
        try:
            with stop_on_signals() as stop, announced([follower.gateway]):
                follower.run(stop)
        finally:
            progress.close()
