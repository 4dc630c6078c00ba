"""Operations state every process shares: heartbeats, counters and task statistics.

These live in the database (not process memory) because gunicorn and Celery run several
processes: a scrape answered by any web worker must see what every worker recorded.
"""

from __future__ import annotations

from django.db import models

from opensquilla_site.timeutil import now_ms


class Heartbeat(models.Model):
    """The last sign of life of one Celery worker (``kind="worker"``) or of beat."""

    KINDS = ("worker", "beat")

    kind = models.CharField(max_length=16)
    name = models.CharField(max_length=255)
    seen_at = models.BigIntegerField(default=now_ms)
    started_at = models.BigIntegerField(default=now_ms)
    # "running" or "stopped" (a worker that shut down cleanly says so).
    state = models.CharField(max_length=16, default="running")
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["kind", "name"], name="ops_heartbeat_kind_name_uniq")
        ]
        ordering = ["kind", "name"]

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


class OpsCounter(models.Model):
    """A monotonic counter (Prometheus ``*_total``), one row per name and label set."""

    name = models.CharField(max_length=100)
    # Label values joined in a fixed order (e.g. the requeue outcome); "" when unlabelled.
    label = models.CharField(max_length=100, default="", blank=True)
    value = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["name", "label"], name="ops_counter_name_label_uniq")
        ]
        ordering = ["name", "label"]

    def __str__(self) -> str:
        return f"{self.name}{{{self.label}}}={self.value}"


class TaskStat(models.Model):
    """Runs, failures and total duration of one Celery task name, from the worker signals."""

    task = models.CharField(max_length=200, unique=True)
    runs = models.BigIntegerField(default=0)
    failures = models.BigIntegerField(default=0)
    duration_sum_ms = models.FloatField(default=0.0)
    last_run_at = models.BigIntegerField(null=True, blank=True)
    last_failure_at = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["task"]

    def __str__(self) -> str:
        return self.task
