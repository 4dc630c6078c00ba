"""The durable receipt ledger, its audit timeline and requeue plans.

``MemoryDurableReceipt`` carries every column of OpenSquilla's ``memory_durable_receipts``
(docs/UPSTREAM.md#columns). ``status`` and ``scope`` stay free text on purpose: upstream stores arbitrary
values and an import must not reject them.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import F, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce

from opensquilla_site.acting import SURFACES as ACTING_SURFACES
from opensquilla_site.timeutil import now_ms
from sessions_app.gateways import GatewayManager, GatewayQuerySet, current_gateway, gateway_field

from .statuses import REPAIR_QUEUE_STATUSES, SCRUB_VERDICT_STATUSES


def new_receipt_id() -> str:
    return str(uuid.uuid4())


class ReceiptQuerySet(GatewayQuerySet["MemoryDurableReceipt"]):
    def newest_first(self) -> ReceiptQuerySet:
        return self.order_by("-created_at", "-id")

    def for_console(self) -> ReceiptQuerySet:
        """The columns the receipts table shows; the wide text columns stay on the server."""
        return self.only(
            "id",
            "gateway_id",
            "receipt_id",
            "session_key",
            "session_id",
            "agent_id",
            "scope",
            "status",
            "reason",
            "attempt_count",
            "next_retry_at_ms",
            "created_at",
            "updated_at",
        )

    def with_verification(self) -> ReceiptQuerySet:
        """Each row's last scrub verification (``verified_at``, ``verified_outcome``; None when
        never verified): a primary-key probe per row shown, no join in the page's walk."""
        verification = CheckpointVerification.objects.filter(receipt_id=OuterRef("pk"))
        return self.annotate(
            verified_at=Subquery(verification.values("verified_at")[:1]),
            verified_outcome=Subquery(verification.values("outcome")[:1]),
        )


class MemoryDurableReceipt(models.Model):
    # (``ReceiptQuerySet.with_verification`` reads ``CheckpointVerification``, defined below.)
    # ``id`` is the insertion order, standing in for SQLite's rowid in every
    # "created_at, rowid" ordering of the reference implementation.
    id = models.BigAutoField(primary_key=True)
    # The gateway the receipt belongs to (sessions_app.gateways). ``receipt_id`` stays unique
    # across gateways, so /receipts/<id> addresses any of them.
    gateway = gateway_field()
    receipt_id = models.CharField(max_length=128, unique=True, default=new_receipt_id)
    session_key = models.TextField()
    session_id = models.TextField()
    turn_id = models.TextField(null=True, blank=True)
    scope = models.CharField(max_length=64)
    source_path = models.TextField(null=True, blank=True)
    target_path = models.TextField(null=True, blank=True)
    content_hash = models.CharField(max_length=128, null=True, blank=True)
    coverage_turn_id = models.TextField(null=True, blank=True)
    coverage_hash = models.CharField(max_length=128, null=True, blank=True)
    coverage_entry_count = models.IntegerField(null=True, blank=True)
    idempotency_key = models.TextField()
    status = models.CharField(max_length=64)
    reason = models.TextField(null=True, blank=True)
    attempt_count = models.IntegerField(default=0)
    next_retry_at_ms = models.BigIntegerField(null=True, blank=True)
    created_at = models.BigIntegerField(default=now_ms)
    updated_at = models.BigIntegerField(default=now_ms)
    schema_version = models.IntegerField(default=1)
    # Derived from session_key on every write, so the console can filter by agent on an index
    # instead of a prefix scan. Empty for keys with no agent segment.
    agent_id = models.CharField(max_length=64, default="", blank=True)
    # Set by the requeue engine: the saved receipt that recovered or superseded this one.
    resolved_by_receipt_id = models.CharField(max_length=128, null=True, blank=True)

    objects = GatewayManager.from_queryset(ReceiptQuerySet)()

    class Meta:
        ordering = ["created_at", "id"]
        permissions = [
            ("operate_receipts", "Can requeue, acknowledge and trigger checkpoints and flushes"),
        ]
        constraints = [
            # An idempotency key is unique within its gateway.
            models.UniqueConstraint(
                fields=["gateway", "idempotency_key"], name="receipt_gateway_idempotency_uniq"
            ),
        ]
        # Every index names who needs it (docs/PERFORMANCE.md, "Index audit"); each one costs
        # every write. Besides these: the primary key, receipt_id (unique: detail page, update,
        # claim) and (gateway, idempotency_key) (unique: the upsert's conflict target).
        indexes = [
            # Per-session reads by status, oldest first (the upstream API's list by session and
            # status, session pages). Kept beside idx_mdr_coverage: without it SQLite's planner
            # (no statistics after a bulk load) serves session_key + status, and even the
            # coverage lookup, from idx_mdr_status_created, scanning a whole status.
            models.Index(fields=["session_key", "status", "created_at"], name="idx_mdr_session"),
            # The checkpoint's exact coverage lookup; its session_key prefix also serves the
            # other per-session reads (session_key filter, purge, requeue fence).
            models.Index(
                fields=[
                    "session_key",
                    "session_id",
                    "scope",
                    "status",
                    "coverage_turn_id",
                    "coverage_hash",
                    "coverage_entry_count",
                ],
                name="idx_mdr_coverage",
            ),
            # Status tabs (?status=), newest first with keyset paging.
            models.Index(fields=["status", "created_at", "id"], name="idx_mdr_status_created"),
            # The unfiltered receipts list, the overview's timeline and the API list.
            models.Index(fields=["created_at", "id"], name="idx_mdr_created"),
            # ?agent=&status= lists, and health's oldest-queued probe per (agent, status).
            models.Index(fields=["agent_id", "status", "created_at"], name="idx_mdr_agent_status"),
            # ?agent= lists, and health's memory-safety window (each agent's newest rows).
            models.Index(fields=["agent_id", "created_at", "id"], name="idx_mdr_agent_created"),
            # ?agent=&scope=(&status=) lists.
            models.Index(
                fields=["agent_id", "scope", "status", "created_at", "id"],
                name="idx_mdr_agent_scope_status",
            ),
            # The repair queue: status IN (repair queue) ordered by next_retry_at_ms,
            # created_at. Partial, so the ~95 % of rows outside the queue never pay for it; a
            # list over other statuses reads idx_mdr_status_created instead.
            models.Index(
                fields=["status", "next_retry_at_ms", "created_at"],
                name="idx_mdr_repair_queue",
                condition=Q(status__in=REPAIR_QUEUE_STATUSES),
            ),
            # The legacy-archive import's "already recorded?" check and repair-by-path
            # (source_path = p OR target_path = p: one index per column).
            models.Index(fields=["source_path"], name="idx_mdr_source_path"),
            models.Index(fields=["target_path"], name="idx_mdr_target_path"),
            # The checkpoint scrub's walk: a gateway's checkpoints in id order from its cursor,
            # a batch at a time. Without it SQLite read every receipt of the gateway after the
            # cursor and sorted them for each batch of 500 (a cycle grew with the square of
            # the ledger). Partial, so only checkpoint rows pay for it.
            models.Index(
                fields=["gateway", "id"],
                name="idx_mdr_scrub_walk",
                condition=Q(scope="checkpoint"),
            ),
            # Since when a checkpoint the scrub found missing or damaged has been at risk: the
            # write that moved it (``updated_at``), not when it was saved (``created_at``), a
            # month before the file went missing perhaps. One probe per (gateway, agent,
            # status) at any ledger size (operations_app/ledger_state.py spells the same WHERE).
            models.Index(
                fields=["gateway", "agent_id", "status", "updated_at"],
                name="idx_mdr_unsafe_found",
                condition=Q(status__in=SCRUB_VERDICT_STATUSES),
            ),
            # Since when each agent's oldest due repair has been due (/metrics, alerts,
            # liveness): one probe per agent at any ledger size. Partial, so only rows in the
            # repair queue pay for it (operations_app/ledger_state.py spells the same WHERE).
            models.Index(
                F("agent_id"),
                Coalesce(F("next_retry_at_ms"), F("created_at")),
                name="idx_mdr_repair_due",
                condition=Q(status__in=REPAIR_QUEUE_STATUSES),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.scope}/{self.status} {self.receipt_id}"

    @property
    def agent_label(self) -> str:
        return self.agent_id or "—"


class ReceiptEvent(models.Model):
    """Append-only timeline: every system status change and every operator action.

    ``receipt_id`` is deliberately not a foreign key: the audit trail outlives the receipt
    when a session delete cascades its rows.
    """

    SURFACES = ACTING_SURFACES

    id = models.BigAutoField(primary_key=True)
    # Indexed by idx_event_receipt (receipt_id, created_at, id), whose prefix serves every
    # lookup by receipt_id: a single-column index beside it (and PostgreSQL's _like twin)
    # would only cost every audited write two more b-tree inserts.
    receipt_id = models.CharField(max_length=128)
    session_key = models.TextField(blank=True, default="")
    # The gateway of the receipt or session the event is about (``local`` for events written
    # before gateways had their own). A plain name, as in the counts: the trail outlives rows,
    # and an audited write checks no foreign key. The audit log's gateway filter reads
    # idx_event_gateway (other gateways) or walks idx_event_created (``local``, most rows).
    gateway_id = models.CharField(max_length=64, default=current_gateway)
    created_at = models.BigIntegerField(default=now_ms)
    actor = models.CharField(max_length=150, default="system")
    surface = models.CharField(max_length=16, default="system")
    action = models.CharField(max_length=32)
    from_status = models.CharField(max_length=64, null=True, blank=True)
    to_status = models.CharField(max_length=64, null=True, blank=True)
    outcome = models.CharField(max_length=32, null=True, blank=True)
    reason = models.TextField(null=True, blank=True)
    plan_id = models.CharField(max_length=64, null=True, blank=True)
    details = models.JSONField(default=dict, blank=True)

    # Lists span every gateway unless an edge chose one (the audit log's ``?gateway=``).
    objects = GatewayManager["ReceiptEvent"]()

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(fields=["receipt_id", "created_at", "id"], name="idx_event_receipt"),
            models.Index(fields=["created_at", "id"], name="idx_event_created"),
            models.Index(fields=["actor", "created_at"], name="idx_event_actor"),
            models.Index(fields=["surface", "action", "created_at"], name="idx_event_surface"),
            # The audit log's plan filter and a plan's follow-up tally. Partial: most events
            # belong to no plan, and a lookup by plan id implies one.
            models.Index(
                fields=["plan_id", "created_at", "id"],
                name="idx_event_plan",
                condition=Q(plan_id__isnull=False),
            ),
            # The audit log's ``?gateway=`` for a gateway other than ``local``: without it a
            # small gateway's page walks every newer event of the others. Partial, so
            # ``local``'s writes (a single-gateway deployment's every write) pay nothing.
            models.Index(
                fields=["gateway_id", "created_at", "id"],
                name="idx_event_gateway",
                condition=~Q(gateway_id="local"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.action} {self.receipt_id} by {self.actor}@{self.surface}"


class RequeuePlan(models.Model):
    """A frozen receipt filter, its dry-run preview and its batched execution."""

    STATES = ("previewed", "queued", "running", "done", "failed")

    plan_id = models.CharField(max_length=64, primary_key=True, default=new_receipt_id)
    created_by = models.CharField(max_length=150, default="system")
    surface = models.CharField(max_length=16, default="system")
    reason = models.TextField(blank=True, default="")
    filters = models.JSONField(default=dict)
    # Explicit selection, when the operator picked rows rather than a whole filter.
    receipt_ids = models.JSONField(default=list, blank=True)
    state = models.CharField(max_length=16, default="previewed")
    total = models.IntegerField(default=0)
    dry_run_counts = models.JSONField(default=dict, blank=True)
    dry_run_samples = models.JSONField(default=dict, blank=True)
    # Gateways (other than ``local``) whose rows the dry run would queue work for: each runs on
    # its own gateway's worker, so the plan can say which of them has none live.
    work_gateways = models.JSONField(default=list, blank=True)
    processed = models.IntegerField(default=0)
    result_counts = models.JSONField(default=dict, blank=True)
    # Keyset cursor of the execution, so a redelivered task resumes instead of restarting.
    cursor_created_at = models.BigIntegerField(null=True, blank=True)
    cursor_id = models.BigIntegerField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    created_at = models.BigIntegerField(default=now_ms)
    updated_at = models.BigIntegerField(default=now_ms)
    started_at = models.BigIntegerField(null=True, blank=True)
    finished_at = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["state", "created_at"], name="idx_plan_state")]

    def __str__(self) -> str:
        return f"plan {self.plan_id} ({self.state})"


class ReceiptCount(models.Model):
    """Receipts per (gateway, agent, scope, status), kept by database triggers on the receipts
    table.

    Every write path (the ledger, the ORM, raw SQL, COPY, cascades) goes through the triggers
    created in migration 0007, in the writer's own transaction, so the sum is exact.
    PostgreSQL appends a signed delta row per statement and key (no hot row that concurrent
    writers would queue on); ``receipts_app.counts.fold_counts`` folds them back to one row per
    key. SQLite (one writer at a time) keeps one row per key and adjusts it in place.
    Read with ``receipts_app.counts.receipt_counts``, never row by row.
    """

    id = models.BigAutoField(primary_key=True)
    # Written by the triggers only: a plain column (no foreign key) so a trigger never checks one.
    gateway_id = models.CharField(max_length=64, default="local")
    agent_id = models.CharField(max_length=64)
    scope = models.CharField(max_length=64)
    status = models.CharField(max_length=64)
    n = models.BigIntegerField()

    def __str__(self) -> str:
        return f"{self.agent_id}/{self.scope}/{self.status}: {self.n:+d}"


class FailureInbox(models.Model):
    """Failed receipts arriving in (+1) or leaving (-1) a failure status, written by the same
    triggers; ``receipts_app.failure_groups`` folds them into :class:`FailureGroupCount`
    (the reason's fingerprint is computed in Python, so it cannot be a trigger)."""

    id = models.BigAutoField(primary_key=True)
    receipt_id = models.CharField(max_length=128)
    scope = models.CharField(max_length=64)
    status = models.CharField(max_length=64)
    reason = models.TextField(null=True, blank=True)
    created_at = models.BigIntegerField()
    sign = models.SmallIntegerField()

    class Meta:
        verbose_name = "failure inbox entry"
        verbose_name_plural = "failure inbox entries"

    def __str__(self) -> str:
        return f"{self.sign:+d} {self.scope}/{self.status} {self.receipt_id}"


class FailureGroupCount(models.Model):
    """Failed receipts per (gateway, agent, scope, status, reason fingerprint), over the whole
    ledger: the number of its :class:`FailureGroupMember` rows, kept by
    ``receipts_app.failure_groups``."""

    id = models.BigAutoField(primary_key=True)
    # The gateway's name, as in ReceiptCount (written by the fold, never through a relation).
    gateway_id = models.CharField(max_length=64, default="local")
    agent_id = models.CharField(max_length=64, default="", blank=True)
    scope = models.CharField(max_length=64)
    status = models.CharField(max_length=64)
    fingerprint = models.CharField(max_length=300)
    count = models.BigIntegerField(default=0)
    first_seen = models.BigIntegerField(default=0)
    last_seen = models.BigIntegerField(default=0)
    sample_receipt_id = models.CharField(max_length=128, default="", blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["gateway_id", "agent_id", "scope", "status", "fingerprint"],
                name="failure_group_key_uniq",
            ),
        ]
        indexes = [models.Index(fields=["count"], name="idx_failure_group_count")]

    def __str__(self) -> str:
        return f"{self.agent_id}/{self.scope}/{self.status} {self.fingerprint!r}: {self.count}"


class FailureGroupMember(models.Model):
    """A failed receipt as folded: the group it is counted in. ``id`` is the order receipts
    joined their groups, so a plan can take a group as it was shown (``id`` up to a mark)."""

    id = models.BigAutoField(primary_key=True)
    receipt_id = models.CharField(max_length=128, unique=True)
    gateway_id = models.CharField(max_length=64, default="local")
    agent_id = models.CharField(max_length=64, default="", blank=True)
    scope = models.CharField(max_length=64)
    status = models.CharField(max_length=64)
    fingerprint = models.CharField(max_length=300)
    created_at = models.BigIntegerField()

    class Meta:
        indexes = [
            models.Index(
                fields=["fingerprint", "agent_id", "scope", "status", "gateway_id", "id"],
                name="idx_failure_member_group",
            )
        ]

    def __str__(self) -> str:
        return f"{self.receipt_id} in {self.agent_id}/{self.scope}/{self.status}"


class OutboxMessage(models.Model):
    """A message the workers have been asked to run and have not finished: the outbox.

    ``receipts_app.enqueue`` writes the row in the caller's transaction, before anything
    answers 202, and the worker deletes it when the task ends; the lost-work sweep sends again
    whatever stays (a broker that was down at commit, a worker killed mid-task).
    """

    task_id = models.CharField(max_length=64, primary_key=True)
    task = models.CharField(max_length=64)  # the short name (enqueue.TASKS)
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    # The queue it was sent to: its gateway's (``gateway.<name>``), "" for the default queue.
    queue = models.CharField(max_length=200, blank=True, default="")
    created_at = models.BigIntegerField(default=now_ms)
    # Last handed to the broker, or last seen still waiting in it (``enqueue.resend_lost``);
    # null while no publish has succeeded since the last attempt.
    sent_at = models.BigIntegerField(null=True, blank=True)
    sends = models.SmallIntegerField(default=1)

    class Meta:
        indexes = [models.Index(fields=["sent_at"], name="idx_outbox_sent_at")]

    def __str__(self) -> str:
        return f"{self.task} {self.task_id}"


class CheckpointVerification(models.Model):
    """When the scrub last verified a checkpoint receipt's file, and what it found
    (receipts_app.scrub, docs/STATUSES.md#scrub).

    A side table keyed by the receipt, not columns on the receipt: the scrub touches every
    checkpoint row once a cycle, and writing the receipts table would fire its count triggers,
    bump ``updated_at`` (the requeue's compare-and-set stamp) and widen the ledger's
    hand-written upsert, the hot write path, which stays exactly as it was. The link has no
    database constraint and no cascade, so a session purge's delete of receipts stays one
    statement; a row whose receipt is gone is never read (every read joins the receipt).
    """

    receipt = models.OneToOneField(
        MemoryDurableReceipt,
        primary_key=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="verification",
    )
    # The receipt's gateway and agent, copied so a gateway's summary reads this table alone.
    gateway_id = models.CharField(max_length=64)
    agent_id = models.CharField(max_length=64, default="", blank=True)
    verified_at = models.BigIntegerField()  # ms: the last check (a stat or a full read)
    read_at = models.BigIntegerField(null=True, blank=True)  # ms: the last full read
    outcome = models.CharField(max_length=32)
    detail = models.TextField(blank=True, default="")
    # The file as last read in full: an unchanged size and mtime skip the read until the
    # full cycle is due.
    size = models.BigIntegerField(null=True, blank=True)
    mtime_ns = models.BigIntegerField(null=True, blank=True)
    # The status the scrub moved the receipt from ("" when it moved nothing): only such a
    # receipt is moved back when a later scrub finds its file whole again.
    moved_from = models.CharField(max_length=64, blank=True, default="")
    # sha256 of bytes already parsed and found to carry the receipt's coverage: re-reading the
    # same bytes hashes them and skips the parse.
    parsed_hash = models.CharField(max_length=128, blank=True, default="")

    class Meta:
        indexes = [
            # A gateway's summary (how much was verified since when, how much failed).
            models.Index(fields=["gateway_id", "outcome", "verified_at"], name="idx_cv_summary"),
        ]

    def __str__(self) -> str:
        return f"{self.receipt_id}: {self.outcome}"


class ScrubCursor(models.Model):
    """Where a gateway's (or one agent's) scrub is in its cycle, so a run resumes there."""

    gateway_id = models.CharField(max_length=64)
    agent_id = models.CharField(max_length=64, blank=True, default="")  # "": every agent
    after_id = models.BigIntegerField(default=0)  # the last receipt id checked this cycle
    cycle_started_at = models.BigIntegerField(null=True, blank=True)
    cycle_full = models.BooleanField(default=False)  # this cycle reads every file in full
    last_cycle_at = models.BigIntegerField(null=True, blank=True)  # when the last cycle ended
    last_cycle_started_at = models.BigIntegerField(null=True, blank=True)
    last_full_cycle_at = models.BigIntegerField(null=True, blank=True)
    last_full_cycle_started_at = models.BigIntegerField(null=True, blank=True)
    last_run = models.JSONField(default=dict, blank=True)  # the last run's counters

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["gateway_id", "agent_id"], name="scrub_cursor_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.gateway_id}/{self.agent_id or '*'} after {self.after_id}"
