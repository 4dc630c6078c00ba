"""Lighter writes, a cheaper overview (issue 15).

- ``idx_mdr_repair_queue`` becomes partial (repair-queue rows only): the rows outside the queue,
  nearly all of them, no longer pay a b-tree insert for it.
- ``ReceiptEvent.receipt_id`` loses its single-column index (and PostgreSQL's ``_like`` twin):
  ``idx_event_receipt (receipt_id, created_at, id)`` already serves every lookup by it.
- ``idx_mdr_hash_mismatch``: a partial index over the rows that match health's hash-mismatch
  heuristic (rare), so the overview can tell in one probe per agent that there is nothing to
  find. Its WHERE is ``receipts_app.health.hash_mismatch_predicate("%")`` frozen as of this
  migration; both planners use it only while the query repeats it term for term.
"""

from django.db import migrations, models

T = "receipts_app_memorydurablereceipt"
HASH_MISMATCH_WHERE = (
    "status NOT IN ('checkpoint_recovered', 'checkpoint_superseded', 'acknowledged', "
    "'checkpoint_failed', 'checkpoint_requeued', 'receipt_orphaned', 'hash_mismatch') AND "
    "(LOWER(status || ' ' || COALESCE(reason, '')) LIKE '%hash!_mismatch%' ESCAPE '!' "
    "OR LOWER(status || ' ' || COALESCE(reason, '')) LIKE '%hash mismatch%')"
)


class Migration(migrations.Migration):

    dependencies = [
        ("receipts_app", "0011_repair_due_index"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="memorydurablereceipt",
            name="idx_mdr_repair_queue",
        ),
        migrations.AlterField(
            model_name="receiptevent",
            name="receipt_id",
            field=models.CharField(max_length=128),
        ),
        migrations.AddIndex(
            model_name="memorydurablereceipt",
            index=models.Index(
                condition=models.Q(
                    ("status__in", ("repair_pending", "distill_failed", "flush_failed"))
                ),
                fields=["status", "next_retry_at_ms", "created_at"],
                name="idx_mdr_repair_queue",
            ),
        ),
        migrations.RunSQL(
            f"CREATE INDEX idx_mdr_hash_mismatch ON {T} (agent_id, created_at, id) "
            f"WHERE {HASH_MISMATCH_WHERE}",
            reverse_sql="DROP INDEX IF EXISTS idx_mdr_hash_mismatch",
        ),
    ]
