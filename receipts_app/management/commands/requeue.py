"""``manage.py requeue [filters | --receipt-id ID ...] [--dry-run] [--reason TEXT]``.

Always goes through a requeue plan, exactly like the console's bulk action: ``--dry-run``
stores the plan's preview and prints counts per outcome with sample rows; otherwise the plan
is executed here, synchronously, and the result counts are printed. ``--plan PLAN_ID`` runs
a plan previewed earlier (by this command, the console or the API).
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from receipts_app.management import cli
from receipts_app.models import RequeuePlan
from receipts_app.requeue import (
    create_requeue_plan,
    get_requeue_plan,
    plan_warnings,
    run_requeue_plan,
    start_requeue_plan,
)
from receipts_app.selectors import ReceiptFilter


def _counts(counts: dict[str, int]) -> str:
    if not counts:
        return "nothing matched"
    return ", ".join(f"{outcome}: {n}" for outcome, n in sorted(counts.items()))


class Command(BaseCommand):
    help = "Requeue failed receipts selected by a filter or by id, through a requeue plan."

    def add_arguments(self, parser):
        cli.add_filter_arguments(parser, reason_flag=False)
        parser.add_argument("--reason", default="", help="why, recorded in the audit log")
        parser.add_argument(
            "--dry-run", action="store_true", help="preview outcomes; change nothing"
        )
        parser.add_argument("--plan", default=None, help="execute this previewed plan id")
        parser.add_argument(
            "--no-wait",
            action="store_true",
            help="queue the plan for the Celery worker instead of running it here",
        )
        parser.add_argument(
            "--samples", type=int, default=5, help="sample rows per outcome (dry run)"
        )
        cli.add_actor_argument(parser)

    def handle(self, *args, **options):
        actor = cli.actor_from(options)
        if options["plan"]:
            if options["dry_run"]:
                raise CommandError("--dry-run cannot be combined with --plan")
            plan = cli.call(get_requeue_plan, options["plan"])
        else:
            params = cli.filter_params(options)
            unknown = cli.unknown_filter_keys(params, ReceiptFilter.PARAMS)
            if unknown:
                raise CommandError(f"unknown filter keys: {', '.join(unknown)}")
            receipt_ids = params.pop("receipt_id", [])
            if options["samples"] < 0:
                raise CommandError("--samples must be 0 or more")
            plan = cli.call(
                create_requeue_plan,
                filters=params,
                receipt_ids=receipt_ids,
                actor=actor,
                reason=options["reason"],
                sample_size=options["samples"],
            )
            self._print_preview(plan)
            if options["dry_run"]:
                self.stdout.write(f"dry run: nothing changed. Execute with --plan {plan.plan_id}")
                return
        plan = cli.call(start_requeue_plan, plan_id=plan.plan_id, actor=actor)
        if options["no_wait"]:
            self.stdout.write(f"plan {plan.plan_id} {plan.state}: the worker will execute it")
            return
        plan = cli.call(run_requeue_plan, plan.plan_id)
        self.stdout.write(
            f"plan {plan.plan_id} {plan.state}: processed {plan.processed} of {plan.total}"
        )
        self.stdout.write(f"results: {_counts(plan.result_counts)}")
        if plan.state == "failed":
            raise CommandError(f"plan {plan.plan_id} failed: {cli.one_line(plan.error)}")

    def _print_preview(self, plan: RequeuePlan) -> None:
        self.stdout.write(f"plan {plan.plan_id}: {plan.total} receipts matched")
        self.stdout.write(f"would be: {_counts(plan.dry_run_counts)}")
        for outcome, rows in sorted((plan.dry_run_samples or {}).items()):
            for row in rows:
                self.stdout.write(
                    f"  {outcome:<16} {row.get('receipt_id')}  {row.get('status')}  "
                    f"{row.get('session_key')}  {cli.one_line(row.get('message') or '')}"
                )
        for warning in plan_warnings(plan):
            self.stdout.write(f"warning: {warning}")
