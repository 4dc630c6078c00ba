"""Cheaper audited writes and counting (issue 15's "write rates no worse than before").

- ``idx_event_plan`` becomes partial (events of a plan only): most audit events belong to no
  plan, and a lookup by plan id implies one.
- PostgreSQL: the count-trigger functions are re-created with one statement per body
  (``receipts_app.ledger.triggers.postgres_functions``); the triggers themselves stay.
"""

from importlib import import_module

from django.db import migrations, models

from receipts_app.ledger import triggers

# The failure statuses 0007 froze into the triggers: unchanged, so the same list.
_0007 = import_module("receipts_app.migrations.0007_ledger_counts")
FAILURE_STATUSES = _0007.FAILURE_STATUSES
COUNT_KEY = _0007.COUNT_KEY


def replace_functions(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for sql in triggers.postgres_functions(FAILURE_STATUSES, COUNT_KEY):
        schema_editor.execute(sql, params=None)


class Migration(migrations.Migration):

    dependencies = [
        ("receipts_app", "0012_lighter_indexes"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="receiptevent",
            name="idx_event_plan",
        ),
        migrations.AddIndex(
            model_name="receiptevent",
            index=models.Index(
                condition=models.Q(("plan_id__isnull", False)),
                fields=["plan_id", "created_at", "id"],
                name="idx_event_plan",
            ),
        ),
        # Reverse: the functions stay as they are (same behaviour, one statement fewer).
        migrations.RunPython(replace_functions, migrations.RunPython.noop),
    ]
