"""``manage.py create_api_token --user NAME --name LABEL --scope read|operate|admin``.

The token is printed once and never again: only its SHA-256 digest is stored.
``--revoke ID`` revokes a token and ``--list`` shows them (prefix only).
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from opensquilla_site.models import ApiToken
from opensquilla_site.timeutil import ms_to_datetime
from opensquilla_site.tokens import SCOPES, create_api_token, revoke_api_token
from receipts_app.management import cli


def _when(value: int | None) -> str:
    moment = ms_to_datetime(value)
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else "-"


class Command(BaseCommand):
    help = "Create (or revoke, or list) a Bearer token for the JSON API."

    def add_arguments(self, parser):
        parser.add_argument("--user", help="the user the token acts as")
        parser.add_argument("--name", help="a label, e.g. the script that uses it")
        parser.add_argument("--scope", choices=SCOPES, default=None)
        parser.add_argument("--revoke", type=int, metavar="ID", help="revoke the token with id")
        parser.add_argument("--list", action="store_true", help="list tokens")

    def handle(self, *args, **options):
        if options["list"]:
            return self._list()
        if options["revoke"] is not None:
            token = cli.call(revoke_api_token, token_id=options["revoke"])
            self.stdout.write(
                f"token {token.pk} ({token.name}) revoked at {_when(token.revoked_at)}"
            )
            return
        missing = [f"--{k}" for k in ("user", "name", "scope") if not options[k]]
        if missing:
            raise CommandError(f"missing {', '.join(missing)} (or use --revoke ID / --list)")
        user = get_user_model().objects.filter(username=options["user"]).first()
        if user is None:
            raise CommandError(f"user {options['user']!r} does not exist")
        if not user.is_active:
            raise CommandError(f"user {options['user']!r} is inactive")
        token, plaintext = cli.call(
            create_api_token, user=user, name=options["name"], scope=options["scope"]
        )
        self.stderr.write(
            f"token {token.pk} '{token.name}' for {user.get_username()} with scope "
            f"{token.scope}; it is shown once, store it now:"
        )
        self.stdout.write(plaintext)

    def _list(self) -> None:
        for token in ApiToken.objects.select_related("user").order_by("pk"):
            state = f"revoked {_when(token.revoked_at)}" if token.revoked_at else "active"
            self.stdout.write(
                f"{token.pk}\t{token.prefix}…\t{token.scope}\t{token.user.get_username()}\t"
                f"{token.name}\t{state}\tlast used {_when(token.last_used_at)}"
            )
