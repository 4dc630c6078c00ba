"""``manage.py prepare_run``: what ``make run`` does before it starts the processes.

Migrates the database and collects the static files; then seeds the demo data only into a
database it has just created for the embedded default (SQLite at ``<var>/opensquilla.sqlite3``,
no ``DATABASE_URL``): the README's first run shows the demo, while a central host pointed at
the fleet's PostgreSQL, or a database that existed before, is never given demo rows. Demo
data elsewhere is asked for explicitly: ``make demo`` / ``manage.py seed_demo``.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

EMBEDDED_NAME = "opensquilla.sqlite3"


def embedded_database() -> Path | None:
    """The embedded default's SQLite file, or None when the database is another one."""
    conf = settings.DATABASES["default"]
    if not conf["ENGINE"].endswith("sqlite3"):
        return None
    path = Path(str(conf["NAME"])).resolve()
    return path if path == (Path(settings.VAR_DIR) / EMBEDDED_NAME).resolve() else None


class Command(BaseCommand):
    help = (
        "Migrate and collect static files; seed demo data only into the embedded default "
        "database when this run created it (make run)."
    )

    def handle(self, *args, **options):
        embedded = embedded_database()
        created = embedded is not None and not embedded.exists()
        call_command("migrate", interactive=False, verbosity=options["verbosity"])
        call_command("collectstatic", interactive=False, verbosity=0)
        if created:
            call_command("seed_demo", stdout=self.stdout, stderr=self.stderr)
            return
        why = (
            "the database existed before this run"
            if embedded is not None
            else "DATABASE_URL names a database this run did not create"
        )
        self.stdout.write(f"demo data: not seeded ({why}); `make demo` seeds it on purpose")
