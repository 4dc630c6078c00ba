"""The checkpoint scrub (receipts_app.scrub): when each checkpoint receipt's file was last
verified and what was found (``CheckpointVerification``), and where each gateway's scrub is in its
cycle (``ScrubCursor``).

The scrub's new status ``checkpoint_missing`` is at risk, so the count triggers feed it to the
failure groups: they are re-installed (SQLite) or their functions replaced (PostgreSQL) with the
statuses at risk frozen below. No row can be ``checkpoint_missing`` before this migration (nothing
wrote it), so nothing is regrouped.
"""

from importlib import import_module


import django.db.models.deletion
from django.db import migrations, models

from receipts_app.ledger import triggers

_0017 = import_module("receipts_app.migrations.0017_gateways")
OLD_AT_RISK = _0017.FAILURE_STATUSES
AT_RISK_STATUSES = (*OLD_AT_RISK, "checkpoint_missing")
COUNT_KEY = _0017.COUNT_KEY


def _install(statuses):
    def run(apps, schema_editor):
        vendor = schema_editor.connection.vendor
        if vendor == "postgresql":
            statements = triggers.postgres_functions(statuses, COUNT_KEY)
        else:
            statements = [
                *triggers.uninstall(vendor),
                *triggers.install(vendor, statuses, COUNT_KEY),
            ]
        for sql in statements:
            schema_editor.execute(sql, params=None)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("receipts_app", "0020_event_gateway_index"),
    ]

    operations = [
        migrations.CreateModel(
            name="CheckpointVerification",
            fields=[
                (
                    "receipt",
                    models.OneToOneField(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        primary_key=True,
                        related_name="verification",
                        serialize=False,
                        to="receipts_app.memorydurablereceipt",
                    ),
                ),
                ("gateway_id", models.CharField(max_length=64)),
                ("agent_id", models.CharField(blank=True, default="", max_length=64)),
                ("verified_at", models.BigIntegerField()),
                ("read_at", models.BigIntegerField(blank=True, null=True)),
                ("outcome", models.CharField(max_length=32)),
                ("detail", models.TextField(blank=True, default="")),
                ("size", models.BigIntegerField(blank=True, null=True)),
                ("mtime_ns", models.BigIntegerField(blank=True, null=True)),
                ("moved_from", models.CharField(blank=True, default="", max_length=64)),
                ("parsed_hash", models.CharField(blank=True, default="", max_length=128)),
            ],
            options={
                "indexes": [
                    models.Index(
                        fields=["gateway_id", "outcome", "verified_at"], name="idx_cv_summary"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="ScrubCursor",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("gateway_id", models.CharField(max_length=64)),
                ("agent_id", models.CharField(blank=True, default="", max_length=64)),
                ("after_id", models.BigIntegerField(default=0)),
                ("cycle_started_at", models.BigIntegerField(blank=True, null=True)),
                ("cycle_full", models.BooleanField(default=False)),
                ("last_cycle_at", models.BigIntegerField(blank=True, null=True)),
                ("last_cycle_started_at", models.BigIntegerField(blank=True, null=True)),
                ("last_full_cycle_at", models.BigIntegerField(blank=True, null=True)),
                ("last_full_cycle_started_at", models.BigIntegerField(blank=True, null=True)),
                ("last_run", models.JSONField(blank=True, default=dict)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("gateway_id", "agent_id"), name="scrub_cursor_uniq"
                    )
                ],
            },
        ),
        migrations.RunPython(_install(AT_RISK_STATUSES), _install(OLD_AT_RISK)),
    ]
