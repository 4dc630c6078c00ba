"""Alerts and time at risk speak gateway.

- An alert rule may be scoped to one gateway (``AlertRule.gateway``, null: every gateway); an
  incident records the gateway of its subject, and the subjects of agent and mirror
  conditions become ``<gateway>/<name>``: existing incidents of those conditions move to
  ``local/<name>`` (what they were about before gateways), so an open incident is not resolved
  and reopened by the upgrade.
- A time-at-risk interval carries its receipt's gateway (backfilled from the receipt; ``local``
  when the receipt is gone), and the daily rollups are kept per (day, gateway, agent). The
  rollups before this migration are ``local``'s; when a backfilled interval belongs to another
  gateway, the rollups are recomputed from the closed intervals (every close is kept), so each
  gateway's mean time to recovery is its own.
"""

from datetime import UTC, datetime

import django.db.models.deletion
from django.db import migrations, models

# Conditions whose subjects are processes serving every gateway (kept as they are).
EVERY_GATEWAY_CONDITIONS = ("worker_silent", "beat_silent")


def backfill_intervals(apps, schema_editor):
    schema_editor.execute(
        "UPDATE operations_app_riskinterval SET gateway_id = COALESCE(("
        "SELECT r.gateway_id FROM receipts_app_memorydurablereceipt r "
        "WHERE r.receipt_id = operations_app_riskinterval.receipt_id), 'local')",
        params=None,
    )
    interval = apps.get_model("operations_app", "RiskInterval")
    if not interval.objects.exclude(gateway_id="local").exists():
        return  # every rollup is local's already
    daily = apps.get_model("operations_app", "RiskDaily")
    totals: dict[tuple, list[int]] = {}
    closed = interval.objects.filter(resolved_at__isnull=False).values_list(
        "gateway_id", "agent_id", "started_at", "resolved_at"
    )
    for gateway, agent, started, resolved in closed.iterator(chunk_size=5000):
        day = datetime.fromtimestamp(resolved / 1000, tz=UTC).date()
        total = totals.setdefault((day, gateway, agent), [0, 0])
        total[0] += 1
        total[1] += resolved - started
    daily.objects.all().delete()
    daily.objects.bulk_create(
        [
            daily(day=d, gateway_id=g, agent_id=a, resolved=n, duration_sum_ms=ms)
            for (d, g, a), (n, ms) in totals.items()
        ],
        batch_size=1000,
    )


def name_incident_gateways(apps, schema_editor):
    incident = apps.get_model("operations_app", "AlertIncident")
    for row in incident.objects.exclude(rule__condition__in=EVERY_GATEWAY_CONDITIONS).exclude(
        subject__contains="/"
    ):
        row.subject = f"local/{row.subject}"[:255]
        row.gateway_id = "local"
        row.save(update_fields=["subject", "gateway_id"])


class Migration(migrations.Migration):
    dependencies = [
        ("operations_app", "0005_plural_names"),
        ("sessions_app", "0005_gateways"),
        ("receipts_app", "0017_gateways"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="riskdaily",
            options={
                "ordering": ["day", "gateway_id", "agent_id"],
                "verbose_name": "daily risk total",
                "verbose_name_plural": "daily risk totals",
            },
        ),
        migrations.RemoveConstraint(
            model_name="riskdaily",
            name="ops_risk_daily_uniq",
        ),
        migrations.AddField(
            model_name="alertincident",
            name="gateway_id",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.AddField(
            model_name="alertrule",
            name="gateway",
            field=models.ForeignKey(
                blank=True,
                help_text="Only this gateway's rows and mirrors; empty: every gateway",
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="sessions_app.gateway",
            ),
        ),
        migrations.AddField(
            model_name="riskdaily",
            name="gateway_id",
            field=models.CharField(default="local", max_length=64),
        ),
        migrations.AddField(
            model_name="riskinterval",
            name="gateway_id",
            field=models.CharField(default="local", max_length=64),
        ),
        migrations.AddConstraint(
            model_name="riskdaily",
            constraint=models.UniqueConstraint(
                fields=("day", "gateway_id", "agent_id"), name="ops_risk_daily_gateway_uniq"
            ),
        ),
        migrations.RunPython(backfill_intervals, migrations.RunPython.noop),
        migrations.RunPython(name_incident_gateways, migrations.RunPython.noop),
    ]
