"""``manage.py check_counts [--fix]``: recount the ledger and compare with the kept counts.

Exit status 0 when the counts table and the failure groups agree with the receipts table,
1 when anything drifted (each difference is printed). ``--fix`` rebuilds what drifted, with
writers held off for the duration, and exits 0 once repaired.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from receipts_app import counts, failure_groups


class Command(BaseCommand):
    help = (
        "Recompute the receipt counts per (agent, scope, status) and the failure groups from "
        "the receipts table and report any drift from the kept ones (exit 1 on drift)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--fix", action="store_true", help="rebuild whatever drifted")

    def handle(self, *args, **options):
        count_drift = counts.find_drift()
        for d in count_drift:
            self.stdout.write(
                f"count drift: agent={d.agent_id!r} scope={d.scope!r} status={d.status!r}"
                + ("" if d.gateway_id == "local" else f" gateway={d.gateway_id!r}")
                + ": "
                f"kept {d.stored}, actual {d.actual}"
            )
        # Group what already arrived first: pending entries are not drift.
        failure_groups.fold_all()
        kept, actual = failure_groups.stored(), failure_groups.recompute()
        group_drift = sorted(k for k in set(kept) | set(actual) if kept.get(k) != actual.get(k))
        for scope, status, fingerprint in group_drift:
            key = (scope, status, fingerprint)
            self.stdout.write(
                f"failure group drift: scope={scope!r} status={status!r} "
                f"fingerprint={fingerprint!r}: kept {kept.get(key, 0)}, actual {actual.get(key, 0)}"
            )
        if not count_drift and not group_drift:
            self.stdout.write(self.style.SUCCESS("counts and failure groups match the ledger"))
            return
        if not options["fix"]:
            self.stderr.write(
                f"{len(count_drift)} count(s) and {len(group_drift)} failure group(s) drifted; "
                "run with --fix to rebuild them"
            )
            raise SystemExit(1)
        if count_drift:
            counts.rebuild_counts()
        if group_drift:
            failure_groups.rebuild_groups()
        self.stdout.write(self.style.SUCCESS("rebuilt; counts and failure groups match again"))
