"""Health's hash-mismatch heuristic no longer counts ``retired_upstream`` rows.

A flush, pre-image or repair row its gateway's upgrade to 0.5.5+ retired left that gateway's
backlog and at-risk counts, but a reason naming a hash mismatch still made the heuristic count
it. Its predicate (``receipts_app.health.hash_mismatch_predicate``) now excludes
``statuses.CLOSED_STATUSES`` (the resolved statuses and ``retired_upstream``), and the partial
index ``idx_mdr_hash_mismatch`` is dropped and built again with that text as its WHERE: both
planners use a partial index only while the query repeats its condition term for term.
``HASH_MISMATCH_WHERE`` is that text frozen as of this migration (``test_health`` checks the
two agree); the reverse builds 0012's again.

The index holds only matching rows (normally none); building it reads the receipts table once
(docs/OPERATIONS.md, "Upgrading a large ledger").
"""

from importlib import import_module

from django.db import migrations

T = "receipts_app_memorydurablereceipt"
HASH_MISMATCH_WHERE = (
    "status NOT IN ('checkpoint_recovered', 'checkpoint_superseded', 'acknowledged', "
    "'retired_upstream', 'checkpoint_failed', 'checkpoint_requeued', 'receipt_orphaned', "
    "'hash_mismatch') AND "
    "(LOWER(status || ' ' || COALESCE(reason, '')) LIKE '%hash!_mismatch%' ESCAPE '!' "
    "OR LOWER(status || ' ' || COALESCE(reason, '')) LIKE '%hash mismatch%')"
)
PREVIOUS_WHERE = import_module("receipts_app.migrations.0012_lighter_indexes").HASH_MISMATCH_WHERE


def _rebuild(where: str) -> list[str]:
    return [
        "DROP INDEX IF EXISTS idx_mdr_hash_mismatch",
        f"CREATE INDEX idx_mdr_hash_mismatch ON {T} (agent_id, created_at, id) WHERE {where}",
    ]


class Migration(migrations.Migration):
    dependencies = [
        ("receipts_app", "0022_scrub_walk_index"),
    ]

    operations = [
        migrations.RunSQL(_rebuild(HASH_MISMATCH_WHERE), reverse_sql=_rebuild(PREVIOUS_WHERE)),
    ]
