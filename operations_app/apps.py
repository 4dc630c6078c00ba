from django.apps import AppConfig


class OperationsAppConfig(AppConfig):
    name = "operations_app"
    verbose_name = "Operations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Celery signal receivers: task statistics, worker heartbeats, beat ticks.
        from receipts_app.signals import requeue_outcomes_recorded

        from . import celery_signals  # noqa: F401
        from .counters import count_requeue_outcomes

        # The requeue services announce their outcomes; /metrics counts them.
        requeue_outcomes_recorded.connect(
            count_requeue_outcomes, dispatch_uid="operations_app.count_requeue_outcomes"
        )
