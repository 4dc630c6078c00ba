"""Create (once) the first console login and print it, for the one-command local start."""

from __future__ import annotations

import os
import secrets

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand

from opensquilla_site.roles import ensure_roles


class Command(BaseCommand):
    help = "Ensure an admin login exists for the console and print it."

    def add_arguments(self, parser):
        parser.add_argument("--username", default=os.environ.get("OPENSQUILLA_ADMIN_USER", "admin"))

    def handle(self, *args, **options):
        username = options["username"]
        password_file = settings.VAR_DIR / f"{username}.password"
        user = User.objects.filter(username=username).first()
        if user is None:
            password = os.environ.get("OPENSQUILLA_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
            user = User.objects.create_superuser(username=username, password=password, email="")
            ensure_roles()
            user.groups.add(Group.objects.get(name="admin"))
            password_file.write_text(password + "\n", encoding="utf-8")
            password_file.chmod(0o600)
        elif password_file.is_file():
            password = password_file.read_text(encoding="utf-8").strip()
        else:
            password = "(unchanged: set earlier, not stored here)"
        self.stdout.write(
            self.style.SUCCESS(
                f"Console login: {console_url()}  user: {username}  password: {password}"
            )
        )


def console_url(bind: str | None = None) -> str:
    """The address ``make run`` serves, from ``WEB_BIND`` as the Procfile's gunicorn reads it."""
    bind = (bind if bind is not None else os.environ.get("WEB_BIND", "")).strip()
    host, _, port = (bind or "127.0.0.1:8000").rpartition(":")
    if bind.startswith("unix:"):
        return f"(unix socket {bind[5:]})"
    if host in ("", "0.0.0.0", "[::]", "::"):  # noqa: S104 - describing a bind, not binding
        host = "127.0.0.1"
    return f"http://{host}:{port or '8000'}/"
