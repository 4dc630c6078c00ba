"""``manage.py repair_once [--agent ID] [--limit N] [--json]``: one repair-worker tick, now."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from receipts_app.management import cli
from receipts_app.repair import run_memory_repair_once, run_repair_tick


class Command(BaseCommand):
    help = (
        "Run the repair worker once (what the beat task does every interval) and print what it "
        "did. Rows not yet due are left alone."
    )

    def add_arguments(self, parser):
        parser.add_argument("--agent", default=None, help="only this agent's queue")
        parser.add_argument(
            "--limit", type=int, default=None, help="rows to repair (with --agent; default 5)"
        )
        parser.add_argument("--json", action="store_true", help="print the summary as JSON")

    def handle(self, *args, **options):
        if options["limit"] is not None and options["limit"] < 1:
            raise CommandError("--limit must be at least 1")
        if options["agent"] is not None:
            if not options["agent"].strip():
                raise CommandError("--agent must not be empty")
            results = cli.call(
                run_memory_repair_once, options["agent"], limit=options["limit"] or 5
            )
            summary = {"agents": [options["agent"]], "processed": results}
        else:
            if options["limit"] is not None:
                raise CommandError("--limit needs --agent (the tick uses its configured budget)")
            summary = cli.call(run_repair_tick)
        if options["json"]:
            self.stdout.write(json.dumps(summary, indent=2, sort_keys=True, default=str))
            return
        processed = summary.get("processed") or []
        recovered = summary.get("recovered")
        if recovered:
            self.stdout.write(f"recovered {recovered} stale claims")
        self.stdout.write(
            f"agents scanned: {', '.join(summary.get('agents') or []) or 'none'}; "
            f"rows processed: {len(processed)}"
        )
        for row in processed:
            self.stdout.write(
                f"  {row.get('receiptId') or '-'}  {row.get('status')}  {row.get('reason') or ''}"
            )
