"""``manage.py check_counts [--fix]``: recount the ledger and compare with the kept counts.

Exit status 0 when the counts table and the failure groups agree with the receipts table,
1 when anything drifted (each difference is printed). ``--fix`` rebuilds what drifted, with
writers held off for the duration, and exits 0 once repaired.

It also reports legacy raw-fallback repairs that repeat another row's archive in a shared
memory workspace (``repair.duplicate_legacy_repairs``, docs/WORKERS.md); ``--fix`` deletes
them, with a ``duplicate_removed`` audit event per row.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from receipts_app import audit, counts, failure_groups, repair


class Command(BaseCommand):
    help = (
        "Recompute the receipt counts per (gateway, agent, scope, status) and the failure "
        "groups from the receipts table and report any drift from the kept ones (exit 1 on "
        "drift)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--fix", action="store_true", help="rebuild whatever drifted")

    def handle(self, *args, **options):
        count_drift, group_drift, duplicates = self._report()
        if not count_drift and not group_drift and not duplicates:
            self.stdout.write(self.style.SUCCESS("counts and failure groups match the ledger"))
            return
        if not options["fix"]:
            self.stderr.write(
                f"{len(count_drift)} count(s) and {len(group_drift)} failure group(s) drifted, "
                f"{len(duplicates)} duplicate legacy repair(s); run with --fix to repair them"
            )
            raise SystemExit(1)
        if duplicates:
            removed = repair.remove_duplicate_legacy_repairs(
                actor=audit.Actor("check_counts", "cli")
            )
            self.stdout.write(f"removed {len(removed)} duplicate legacy repair(s)")
            # The deletes moved counts and groups: compare again after them.
            count_drift, group_drift, _ = self._report(quiet=True)
        if count_drift:
            counts.rebuild_counts()
        if group_drift:
            failure_groups.rebuild_groups()
        self.stdout.write(self.style.SUCCESS("rebuilt; counts and failure groups match again"))

    def _report(self, *, quiet: bool = False) -> tuple[list, list, list]:
        write = (lambda _line: None) if quiet else self.stdout.write
        count_drift = counts.find_drift()
        for d in count_drift:
            write(
                f"count drift: agent={d.agent_id!r} scope={d.scope!r} status={d.status!r}"
                + ("" if d.gateway_id == "local" else f" gateway={d.gateway_id!r}")
                + f": kept {d.stored}, actual {d.actual}"
            )
        # Group what already arrived first: pending entries are not drift.
        failure_groups.fold_all(wait=True)
        kept, actual = failure_groups.stored(), failure_groups.recompute()
        group_drift = sorted(k for k in set(kept) | set(actual) if kept.get(k) != actual.get(k))
        for key in group_drift:
            gateway, agent, scope, status, fingerprint = key
            write(
                f"failure group drift: agent={agent!r} scope={scope!r} status={status!r} "
                + ("" if gateway == "local" else f"gateway={gateway!r} ")
                + f"fingerprint={fingerprint!r}: kept {kept.get(key, 0)}, "
                f"actual {actual.get(key, 0)}"
            )
        duplicates = repair.duplicate_legacy_repairs()
        for row in duplicates:
            write(
                f"duplicate legacy repair: {row.receipt_id} agent={row.agent_id!r} "
                + ("" if row.gateway_id == "local" else f"gateway={row.gateway_id!r} ")
                + f"path={row.source_path!r} status={row.status!r}"
            )
        return count_drift, group_drift, duplicates
