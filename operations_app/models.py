"""Operations state every process shares: heartbeats, counters and task statistics.

These live in the database (not process memory) because gunicorn and Celery run several
processes: a scrape answered by any web worker must see what every worker recorded.
"""

from __future__ import annotations

from django.db import models

from opensquilla_site.timeutil import now_ms
from receipts_app.verdict import State, gateway_state
from sessions_app.gateways import DEFAULT_GATEWAY, Gateway, GatewayManager


class Heartbeat(models.Model):
    """The last sign of life of one Celery worker (``kind="worker"``), of beat, or of a
    mirror process (``kind="mirror"``; operations_app.pulse)."""

    KINDS = ("worker", "beat", "mirror")

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


class AlertRule(models.Model):
    """One condition an admin wants to hear about, and where to send it."""

    FAILURE_STATUS = "failure_status"
    BACKLOG_COUNT = "repair_backlog_count"
    BACKLOG_AGE = "repair_backlog_age"
    AT_RISK_AGE = "memory_at_risk_age"
    MIRROR_LAG = "mirror_lag"
    WORKER_SILENT = "worker_silent"
    BEAT_SILENT = "beat_silent"
    GATEWAY_MEMORY_GAP = "gateway_memory_gap"
    GATEWAY_LINK = "gateway_link"
    CHECKPOINT_UNSAFE = "checkpoint_unsafe"
    CONDITIONS = (
        (FAILURE_STATUS, "Receipts in a failure status (count at least N)"),
        (BACKLOG_COUNT, "Repair backlog above N receipts"),
        (BACKLOG_AGE, "Oldest due repair older than T seconds"),
        (AT_RISK_AGE, "Memory at risk for longer than T seconds"),
        (MIRROR_LAG, "Mirror lag above T seconds"),
        (WORKER_SILENT, "No worker heartbeat for T seconds"),
        (BEAT_SILENT, "No beat tick for T seconds"),
        (GATEWAY_MEMORY_GAP, "Gateway and console disagree on at least N receipts (memory gap)"),
        (GATEWAY_LINK, "Gateway link not ok for longer than T seconds"),
        (
            CHECKPOINT_UNSAFE,
            "Saved checkpoints found missing or damaged on disk by the scrub (count at least N)",
        ),
    )
    WEBHOOK = "webhook"
    SLACK = "slack"
    EMAIL = "email"
    CHANNELS = (
        (WEBHOOK, "JSON webhook (HMAC-SHA256 signed)"),
        (SLACK, "Slack-compatible webhook"),
        (EMAIL, "E-mail"),
    )

    name = models.CharField(max_length=100)
    condition = models.CharField(max_length=32, choices=CONDITIONS)
    # Narrow the condition to one gateway, agent or scope; empty: every gateway / agent / scope.
    gateway = models.ForeignKey(
        Gateway,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="Only this gateway's rows and mirrors; empty: every gateway",
    )
    agent = models.CharField(max_length=64, blank=True, default="")
    scope = models.CharField(max_length=64, blank=True, default="")
    threshold = models.FloatField(help_text="N receipts, or T seconds, depending on the condition")
    channel = models.CharField(max_length=16, choices=CHANNELS)
    # A webhook URL, or comma-separated e-mail addresses. Webhook URLs often embed a token,
    # so pages show only their scheme and host.
    target = models.TextField()
    # The HMAC key of the JSON webhook. Never rendered back: forms and admin mask it.
    secret = models.CharField(max_length=200, blank=True, default="")
    cooldown_seconds = models.PositiveIntegerField(
        default=3600, help_text="After an incident resolves, a new one within this time is not sent"
    )
    enabled = models.BooleanField(default=True)
    created_by = models.CharField(max_length=150, default="system")
    created_at = models.BigIntegerField(default=now_ms)
    updated_at = models.BigIntegerField(default=now_ms)

    class Meta:
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return self.name


class AlertIncident(models.Model):
    """One firing of a rule for one subject (an agent, a mirror, "workers"), until resolved."""

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="incidents")
    subject = models.CharField(max_length=255, default="", blank=True)
    # The gateway the subject belongs to ("" for workers and beat, which serve every gateway).
    gateway_id = models.CharField(max_length=64, default="", blank=True)
    opened_at = models.BigIntegerField(default=now_ms)
    resolved_at = models.BigIntegerField(null=True, blank=True)
    # False when a cooldown swallowed the firing notice (and so the resolved notice too).
    notified = models.BooleanField(default=True)
    summary = models.TextField(default="", blank=True)
    value = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["-opened_at"]
        constraints = [
            # Dedup: at most one open incident per rule and subject, whatever races.
            models.UniqueConstraint(
                fields=["rule", "subject"],
                condition=models.Q(resolved_at__isnull=True),
                name="ops_incident_one_open_per_subject",
            )
        ]
        indexes = [models.Index(fields=["rule", "subject", "opened_at"], name="ops_incident_rule")]

    def __str__(self) -> str:
        return f"{self.rule_id}:{self.subject}"


class AlertDelivery(models.Model):
    """One notice to send (firing, resolved or test), retried by a Celery task with backoff."""

    KINDS = ("firing", "resolved", "test")
    STATES = ("pending", "sent", "failed")

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="deliveries")
    incident = models.ForeignKey(
        AlertIncident, null=True, blank=True, on_delete=models.SET_NULL, related_name="deliveries"
    )
    kind = models.CharField(max_length=16)
    state = models.CharField(max_length=16, default="pending")
    payload = models.JSONField(default=dict)
    attempts = models.IntegerField(default=0)
    next_attempt_at = models.BigIntegerField(null=True, blank=True)
    last_error = models.TextField(default="", blank=True)
    created_at = models.BigIntegerField(default=now_ms)
    sent_at = models.BigIntegerField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "alert deliveries"
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["rule", "created_at"], name="ops_delivery_rule"),
            models.Index(fields=["state", "next_attempt_at"], name="ops_delivery_due"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} #{self.pk} ({self.state})"


class AlertDeliveryAttempt(models.Model):
    """Every try of a delivery: when, how it went, what the receiver said."""

    delivery = models.ForeignKey(AlertDelivery, on_delete=models.CASCADE, related_name="tries")
    number = models.IntegerField()
    attempted_at = models.BigIntegerField(default=now_ms)
    ok = models.BooleanField(default=False)
    status_code = models.IntegerField(null=True, blank=True)
    error = models.TextField(default="", blank=True)
    duration_ms = models.IntegerField(default=0)

    class Meta:
        ordering = ["delivery", "number"]
        indexes = [models.Index(fields=["delivery", "number"], name="ops_attempt_delivery")]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.delivery_id}"


class RiskInterval(models.Model):
    """One failure's time at risk: from when it was seen failing until it was resolved."""

    receipt_id = models.CharField(max_length=128)
    # The receipt's gateway (a plain name, as in the counts: the interval outlives the row).
    gateway_id = models.CharField(max_length=64, default=DEFAULT_GATEWAY)
    agent_id = models.CharField(max_length=64, default="", blank=True)
    scope = models.CharField(max_length=64, default="", blank=True)
    failed_status = models.CharField(max_length=64)
    started_at = models.BigIntegerField()
    resolved_at = models.BigIntegerField(null=True, blank=True)
    # The status that ended it (checkpoint_recovered, acknowledged, …) or "purged".
    resolution = models.CharField(max_length=64, default="", blank=True)

    # Lists span every gateway unless an edge chose one (``?gateway=``).
    objects = GatewayManager()

    class Meta:
        ordering = ["-started_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["receipt_id"],
                condition=models.Q(resolved_at__isnull=True),
                name="ops_risk_one_open_per_receipt",
            )
        ]
        indexes = [
            models.Index(fields=["resolved_at", "agent_id", "started_at"], name="ops_risk_open"),
            models.Index(fields=["receipt_id", "resolved_at"], name="ops_risk_receipt"),
        ]

    def __str__(self) -> str:
        return f"{self.receipt_id} {self.failed_status}"


class RiskDaily(models.Model):
    """Per gateway, agent and UTC day: failures resolved that day and their total time at risk."""

    day = models.DateField()
    gateway_id = models.CharField(max_length=64, default=DEFAULT_GATEWAY)
    agent_id = models.CharField(max_length=64, default="", blank=True)
    resolved = models.IntegerField(default=0)
    duration_sum_ms = models.BigIntegerField(default=0)

    # Lists span every gateway unless an edge chose one (``?gateway=``).
    objects = GatewayManager()

    class Meta:
        verbose_name = "daily risk total"
        verbose_name_plural = "daily risk totals"
        ordering = ["day", "gateway_id", "agent_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["day", "gateway_id", "agent_id"], name="ops_risk_daily_gateway_uniq"
            )
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.gateway_id}/{self.agent_id}"


class GatewayLink(models.Model):
    """The last time the console asked a linked gateway itself (docs/MIRROR.md#gateway-link):
    how the link went and what the gateway said about itself. One row per linked gateway,
    rewritten by the beat task; pages read it and never connect."""

    gateway = models.OneToOneField(
        "sessions_app.Gateway", on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    address = models.CharField(max_length=500, default="", blank=True)  # as asked
    checked_at = models.BigIntegerField(default=now_ms)  # this attempt
    ok_at = models.BigIntegerField(null=True, blank=True)  # the last attempt that got an answer
    # Since when the link has been in a state other than ok (None while ok).
    failing_since = models.BigIntegerField(null=True, blank=True)
    state = models.CharField(max_length=32, default="ok")  # gateway_link.LinkState
    message = models.TextField(default="", blank=True)
    error_code = models.CharField(max_length=64, default="", blank=True)  # the gateway's own
    server_version = models.CharField(max_length=64, default="", blank=True)
    protocol = models.IntegerField(null=True, blank=True)
    methods = models.JSONField(default=list, blank=True)
    # The principal's scopes when the gateway names them (protocol 4); None: not said (0.3.0).
    scopes = models.JSONField(null=True, blank=True)
    state_dir = models.TextField(default="", blank=True)

    class Meta:
        ordering = ["gateway_id"]

    def __str__(self) -> str:
        return f"{self.gateway_id}: {self.state}"

    @property
    def can_run_repairs(self) -> bool:
        """The gateway offers ``memory.repair.run`` and the token holds (or, where the gateway
        does not say, may hold) ``operator.admin``."""
        if self.state != "ok" or "memory.repair.run" not in (self.methods or []):
            return False
        return self.scopes is None or "operator.admin" in self.scopes


class GatewayMemoryVerdict(models.Model):
    """One agent's ``doctor.memory.status`` as its gateway last answered it, with the time.

    ``read_at`` is the last attempt, ``answered_at`` the last answer: on a failed attempt the
    numbers of the last answer are kept and ``state`` says why there is no newer one."""

    # The gateway's link row (its primary key is the gateway's name, so ``gateway_id`` reads
    # as the gateway): a page reads verdicts and their link in one query.
    gateway = models.ForeignKey(
        GatewayLink, on_delete=models.CASCADE, related_name="verdicts", db_index=False
    )
    agent_id = models.CharField(max_length=64)
    read_at = models.BigIntegerField(default=now_ms)
    answered_at = models.BigIntegerField(null=True, blank=True)
    state = models.CharField(max_length=32, default="ok")
    message = models.TextField(default="", blank=True)
    error_code = models.CharField(max_length=64, default="", blank=True)
    memory_safety = models.CharField(max_length=32, default="", blank=True)  # ok | error
    repair_status = models.CharField(max_length=32, default="", blank=True)  # healthy | ...
    repair_backlog_count = models.IntegerField(null=True, blank=True)
    # Only from a deep answer: degraded compactions, their failures, raw archives on disk.
    pending_repair_count = models.IntegerField(null=True, blank=True)
    repair_failures = models.JSONField(default=list, blank=True)
    raw_fallback_count = models.IntegerField(null=True, blank=True)
    payload = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["gateway_id", "agent_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["gateway", "agent_id"], name="ops_gateway_verdict_agent_uniq"
            )
        ]

    def __str__(self) -> str:
        return f"{self.gateway_id}/{self.agent_id}: {self.state}"

    @property
    def own_state(self) -> State:
        """The gateway's last answer in the console's words (``receipts_app.verdict``);
        ``unknown`` before its first answer."""
        if self.answered_at is None:
            return State.UNKNOWN
        return gateway_state(
            memory_safety=self.memory_safety,
            repair_backlog=self.repair_backlog_count or 0,
            pending_repairs=self.pending_repair_count,
            repair_failures=len(self.repair_failures or ()),
        )
