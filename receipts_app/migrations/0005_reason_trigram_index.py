"""PostgreSQL only: a trigram index so the console's "reason contains" filter is not a scan.

Django's ``icontains`` compiles to ``UPPER(reason::text) LIKE UPPER(%s)``, which a GIN index on
``UPPER(reason)`` with ``gin_trgm_ops`` serves. Creating the ``pg_trgm`` extension needs a
privileged role; where it is refused the index is skipped (the filter still works, slower)
instead of failing the deployment. SQLite has no such index and needs none at its sizes.
"""

import logging

from django.db import migrations, transaction

logger = logging.getLogger(__name__)
INDEX = "idx_mdr_reason_trgm"


def create_index(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    try:
        with transaction.atomic(using=schema_editor.connection.alias):
            schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
            schema_editor.execute(
                f"CREATE INDEX IF NOT EXISTS {INDEX} ON receipts_app_memorydurablereceipt "
                "USING gin (UPPER(reason::text) gin_trgm_ops)"
            )
    except Exception as exc:  # noqa: BLE001 - an optional speed-up must not block a deploy
        logger.warning("reason trigram index not created (%s); reason filters will scan", exc)


def drop_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    dependencies = [("receipts_app", "0004_console_agent_scope_index")]

    operations = [migrations.RunPython(create_index, drop_index)]
