"""``manage.py seed_demo [--with-users]``: idempotent demo data for the console."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from receipts_app.audit import Actor, acting_as
from receipts_app.management import cli
from receipts_app.management.demo import deliberate_failures_due, seed_demo


class Command(BaseCommand):
    help = (
        "Create demo sessions, transcripts and receipts of every status (safe to run again). "
        "--with-users also creates admin/operator/viewer logins."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--with-users",
            action="store_true",
            help="create admin, operator and viewer users (password: $OPENSQUILLA_DEMO_PASSWORD "
            "or generated and printed)",
        )

    def handle(self, *args, **options):
        # The demo writes failed checkpoints on purpose (a workspace under a regular file); the
        # checkpoint writer logs each as a WARNING, which must not alarm anyone. Announced only
        # when they will be written: a second run writes none.
        due = deliberate_failures_due()
        if due:
            lines = "One 'checkpoint_failed ... Not a directory' WARNING line follows: it is"
            if due > 1:
                lines = (
                    f"{due} 'checkpoint_failed ... Not a directory' WARNING lines follow: they are"
                )
            self.stdout.write(
                f"Seeding demo data. {lines} the demo's deliberate failures, for the console to show."
            )
        else:
            self.stdout.write("Seeding demo data.")
        with acting_as(Actor("seed_demo", "cli")), cli.cli_errors():
            report = seed_demo(with_users=options["with_users"])
        self.stdout.write(f"workspace: {report.workspace}")
        self.stdout.write(
            f"demo data: {len(report.created)} created, {len(report.existing)} already present"
        )
        for username, password in report.users:
            self.stdout.write(f"login: {username} / {password}")
