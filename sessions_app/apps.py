from django.apps import AppConfig
from django.db import connections
from django.db.models.signals import post_migrate


def _ensure_local_gateway(sender: AppConfig, **kwargs: object) -> None:
    # Also after a test's flush, which empties the table the migration filled.
    from .gateways import DEFAULT_GATEWAY, Gateway

    using = str(kwargs.get("using") or "default")
    connection = connections[using]
    if Gateway._meta.db_table not in connection.introspection.table_names():
        return  # migrated back to before the gateways
    Gateway.objects.using(using).get_or_create(
        name=DEFAULT_GATEWAY, defaults={"display_name": DEFAULT_GATEWAY}
    )


class SessionsAppConfig(AppConfig):
    name = "sessions_app"
    verbose_name = "Agent sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        post_migrate.connect(_ensure_local_gateway, sender=self)
