"""``manage.py repair_once [--agent ID] [--limit N] [--json]``: one repair-worker tick, now.

``--session-key``/``--compaction-id``/``--summary-id`` repair only the matching degraded
compaction summaries (upstream's ``memory.repair.run`` selector), including ones a previous
repair left ``failed_retryable``, which the tick does not retry.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from receipts_app.management import cli
from receipts_app.repair import run_memory_repair_once, run_repair_tick
from sessions_app.keys import agent_id_for_session_key


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
        parser.add_argument(
            "--session-key", default=None, help="repair this session's degraded compactions"
        )
        parser.add_argument("--compaction-id", default=None, help="only this compaction")
        parser.add_argument("--summary-id", default=None, help="only this compaction summary")
        parser.add_argument("--json", action="store_true", help="print the summary as JSON")

    def handle(self, *args, **options):
        if options["limit"] is not None and options["limit"] < 1:
            raise CommandError("--limit must be at least 1")
        if options["agent"] is not None and not options["agent"].strip():
            raise CommandError("--agent must not be empty")
        selector = {
            name: options[option]
            for name, option in (
                ("sessionKey", "session_key"),
                ("compactionId", "compaction_id"),
                ("summaryId", "summary_id"),
            )
            if options[option]
        }
        if selector:
            key = options["session_key"]
            agent = options["agent"] or (agent_id_for_session_key(key) if key else None) or "main"
            results = cli.call(
                run_memory_repair_once, agent, limit=options["limit"] or 5, params=selector
            )
            summary: dict[str, Any] = {"agents": [agent], "processed": results}
        elif options["agent"] is not None:
            results = cli.call(
                run_memory_repair_once, options["agent"], limit=options["limit"] or 5
            )
            summary = {"agents": [options["agent"]], "processed": results}
        else:
            if options["limit"] is not None:
                raise CommandError("--limit needs --agent (the tick uses its configured budget)")
            # Asked by an operator: it runs even where the gateway repairs its own rows.
            summary = cli.call(run_repair_tick, asked=True)
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
            subject = row.get("receiptId") or (
                f"summary {row['summaryId']}" if row.get("summaryId") is not None else "-"
            )
            self.stdout.write(f"  {subject}  {row.get('status')}  {row.get('reason') or ''}")
