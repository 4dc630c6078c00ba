"""What the mirror remembers: per source its cursor, lease and state; per mirrored session and
receipt what upstream last said, and whether the row is gone upstream.

Kept apart from the ledger tables on purpose: the ledger row is what operators act on, these
rows are evidence of where it came from. A receipt is matched by ``idempotency_key`` (the
ledger's only conflict target), a session by its canonical key.
"""

from __future__ import annotations

from django.db import models

from opensquilla_site.timeutil import now_ms
from sessions_app.gateways import gateway_field


class MirrorSource(models.Model):
    """One followed ``sessions.db`` of one gateway: cursor, lease and the state operators see.

    Keyed by (gateway, path): two Docker hosts both at /var/lib/opensquilla/state/sessions.db
    are two sources with their own cursor and lease."""

    gateway = gateway_field()
    path = models.TextField()  # resolved absolute path
    workspace = models.TextField(blank=True, default="")
    # The file the cursor belongs to: st_dev/st_ino plus SQLite's application_id. When they
    # change the file was replaced and the cursor starts again (rows dedupe, nothing is lost).
    identity = models.JSONField(default=dict, blank=True)

    # Cursor: keyset positions in the source, advanced in the transaction that applied the rows.
    sessions_updated_at = models.BigIntegerField(default=0)
    sessions_key = models.TextField(blank=True, default="")
    entries_id = models.BigIntegerField(default=0)
    receipts_updated_at = models.BigIntegerField(default=0)
    receipts_key = models.TextField(blank=True, default="")
    initial_sync_done = models.BooleanField(default=False)

    # Lease: the follower allowed to apply rows until ``lease_until`` (ms). Taken and checked
    # under this row's lock in every applying transaction, so two followers never both apply.
    lease_owner = models.CharField(max_length=64, blank=True, default="")
    lease_until = models.BigIntegerField(default=0)

    # State for the console, the health API and /metrics.
    phase = models.CharField(max_length=16, default="starting")  # starting/importing/following
    heartbeat_at = models.BigIntegerField(default=0)
    interval_seconds = models.FloatField(default=1.0)
    last_sync_at = models.BigIntegerField(null=True, blank=True)  # last pass that caught up
    last_change_at = models.BigIntegerField(null=True, blank=True)  # last pass that applied rows
    lag_ms = models.BigIntegerField(null=True, blank=True)  # source stamp -> our commit, last row
    error = models.TextField(blank=True, default="")
    error_code = models.CharField(max_length=32, blank=True, default="")
    error_since = models.BigIntegerField(null=True, blank=True)
    warning = models.TextField(blank=True, default="")
    rows_applied = models.BigIntegerField(default=0)
    created_at = models.BigIntegerField(default=now_ms)

    class Meta:
        ordering = ["gateway_id", "path"]
        constraints = [
            models.UniqueConstraint(fields=["gateway", "path"], name="mirror_source_gateway_path")
        ]

    def __str__(self) -> str:
        return self.path


class MirroredSession(models.Model):
    source = models.ForeignKey(MirrorSource, on_delete=models.CASCADE, related_name="sessions")
    session_key = models.TextField()
    gone_at = models.BigIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source", "session_key"], name="mirror_session_source_key_uniq"
            )
        ]
        indexes = [
            models.Index(fields=["source", "gone_at"], name="mirror_session_gone"),
            # The session page's "mirrored / gone upstream" mark looks a key up across sources.
            models.Index(fields=["session_key"], name="mirror_session_key"),
        ]

    def __str__(self) -> str:
        return self.session_key


class MirroredReceipt(models.Model):
    """Upstream's last word on one receipt: its ``updated_at`` and status when we applied it.

    A local row whose ``updated_at`` differs from ``source_updated_at`` was changed here
    (requeued, acknowledged, recovered, superseded) and is only overwritten when upstream moves
    the receipt on to another status.
    """

    source = models.ForeignKey(MirrorSource, on_delete=models.CASCADE, related_name="receipts")
    idempotency_key = models.TextField()
    source_updated_at = models.BigIntegerField()
    source_status = models.CharField(max_length=64)
    gone_at = models.BigIntegerField(null=True, blank=True)
    # Deleted upstream by the gateway's upgrade to 0.5.5+ (V044 retires every flush, pre-image
    # and repair receipt), not by a delete: kept here and labelled so, never "gone upstream".
    retired_at = models.BigIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source", "idempotency_key"], name="mirror_receipt_source_key_uniq"
            )
        ]
        indexes = [
            models.Index(fields=["source", "gone_at"], name="mirror_receipt_gone"),
            # The retired rows of a gateway (its undistilled archives, the fleet's counts).
            models.Index(fields=["source", "retired_at"], name="mirror_receipt_retired"),
            models.Index(fields=["idempotency_key"], name="mirror_receipt_key"),
        ]

    def __str__(self) -> str:
        return self.idempotency_key


class MirroredTranscript(models.Model):
    """One session generation's transcript as the mirror holds it from the source, up to an
    entry id: the row count, the native sum and the XOR of the rows' digests
    (``importer.source.Fingerprint``), and the same for its **tail**, the rows after
    ``tail_from`` (its newest few dozen).

    Upstream rewrites rows in place (after 0.5.3); a touched session whose tail in the file no
    longer equals the stored tail plus what the mirror applied since has an edited (or
    deleted) recent row, and only that tail is read again; the whole session is compared on a
    slower clock (docs/MIRROR.md, "Messages edited in place"). So a pass costs the tail's
    length, never the session's.
    """

    source = models.ForeignKey(MirrorSource, on_delete=models.CASCADE, related_name="transcripts")
    session_id = models.CharField(max_length=64)
    through_id = models.BigIntegerField(default=0)
    entry_count = models.IntegerField(default=0)
    native = models.BigIntegerField(default=0)
    digest = models.BigIntegerField(default=0)
    tail_from = models.BigIntegerField(default=0)
    tail_count = models.IntegerField(default=0)
    tail_native = models.BigIntegerField(default=0)
    tail_digest = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source", "session_id"], name="mirror_transcript_source_session"
            )
        ]

    def __str__(self) -> str:
        return self.session_id


class MirrorSkippedRow(models.Model):
    """A source row the mirror did not apply, and why (a control character in a key or id,
    ``opensquilla_site.identifiers``): the cursor moved past it, so without this record the
    only trace would be a log line. One row per source row (kind + source rowid); seen again
    (the overlap window, a replaced file) it only moves ``last_seen_at``. Shown on the
    overview's mirror panel (counts per reason) and listed on the liveness page."""

    source = models.ForeignKey(MirrorSource, on_delete=models.CASCADE, related_name="skipped")
    kind = models.CharField(max_length=32)  # session, transcript entry, receipt
    source_rowid = models.BigIntegerField()
    # The column and rule it broke, without the position: what the counts group by.
    reason = models.CharField(max_length=200)
    detail = models.TextField(blank=True, default="")  # the full problem, with its position
    # The row's key or id, control characters written as escapes (\n, \x00).
    name = models.TextField(blank=True, default="")
    first_seen_at = models.BigIntegerField(default=now_ms)
    last_seen_at = models.BigIntegerField(default=now_ms)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source", "kind", "source_rowid"], name="mirror_skipped_source_row_uniq"
            )
        ]
        indexes = [models.Index(fields=["source", "reason"], name="mirror_skipped_reason")]

    def __str__(self) -> str:
        return f"{self.kind} {self.source_rowid}"
