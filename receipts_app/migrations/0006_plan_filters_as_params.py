"""Stored requeue plans keep ``ReceiptFilter.to_params()``: the API's query parameter names.

Early code also accepted the filter's attribute names (``statuses``, ``scopes``,
``reason_contains``, ``receipt_ids``) as aliases. Any plan stored under those names is
rewritten, so a plan read back selects exactly what it selected when it was frozen.
"""

from django.db import migrations

LEGACY_KEYS = {
    "statuses": "status",
    "scopes": "scope",
    "reason_contains": "reason",
    "receipt_ids": "receipt_id",
}


def forwards(apps, schema_editor):
    RequeuePlan = apps.get_model("receipts_app", "RequeuePlan")
    for plan in RequeuePlan.objects.only("pk", "filters").iterator():
        filters = plan.filters or {}
        if not any(key in filters for key in LEGACY_KEYS):
            continue
        plan.filters = {LEGACY_KEYS.get(key, key): value for key, value in filters.items()}
        plan.save(update_fields=["filters"])


class Migration(migrations.Migration):
    dependencies = [("receipts_app", "0005_reason_trigram_index")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
