from django.apps import AppConfig


class OperationsAppConfig(AppConfig):
    name = "operations_app"
    verbose_name = "Operations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from receipts_app.signals import (
            process_started,
            process_stopped,
            requeue_outcomes_recorded,
        )
        from sessions_app.gateways import register_queue_consumers

        # Celery signal receivers: task statistics, worker heartbeats, beat ticks.
        # tasks: registered in every process, since deliveries are published by name.
        from . import celery_signals, tasks  # noqa: F401
        from .counters import count_requeue_outcomes
        from .liveness import queue_consumers
        from .pulse import announced_process_started, announced_process_stopped

        # The requeue services announce their outcomes; /metrics counts them.
        requeue_outcomes_recorded.connect(
            count_requeue_outcomes, dispatch_uid="operations_app.count_requeue_outcomes"
        )
        # The mirror's processes announce themselves: each gets its own heartbeat (pulse).
        process_started.connect(
            announced_process_started, dispatch_uid="operations_app.process_started"
        )
        process_stopped.connect(
            announced_process_stopped, dispatch_uid="operations_app.process_stopped"
        )
        # Who consumes which queue, for the "no live worker" warnings (sessions_app.gateways).
        register_queue_consumers(queue_consumers)
