from django.apps import AppConfig


class ReceiptsAppConfig(AppConfig):
    name = "receipts_app"
    verbose_name = "Memory durable receipts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # sessions_app must not import receipts_app, yet deleting a session must purge every
        # receipt of its key in the same transaction (docs/UPSTREAM.md#cascades). receipts_app therefore
        # registers its purge with the session service explicitly, once, at start-up.
        from sessions_app import services as session_services

        from . import ledger

        session_services.register_session_purger(ledger.purge_receipts_for_session_key)

        # Celery's autodiscovery only imports task modules in a worker or beat; the web process
        # publishes by task name (receipts_app.enqueue), so its registry must hold them too.
        from . import tasks  # noqa: F401
