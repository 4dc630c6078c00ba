from django.apps import AppConfig


class OperationsAppConfig(AppConfig):
    name = "operations_app"
    verbose_name = "Operations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Celery signal receivers: task statistics, worker heartbeats, beat ticks.
        from . import celery_signals  # noqa: F401
