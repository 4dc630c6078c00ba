"""Transcript entries keep their gateway's own id (``gateway_entry_id``) beside ours.

Before this, entry ids were one space for every gateway and an import or the mirror gave an
entry whose id another gateway held a new one. What the database itself still holds of those
own ids is given back here: a row of a gateway other than ``local`` was stored under its own
id unless it was renumbered, and a row the importer named ``opensquilla-import-<id>`` (a source
row without a message id) carries its own id in that name. A renumbered row with a message id
of its own gets its id back the next time its source is read: the mirror reads a followed
file's entries again once (``receipts_app.mirror`` migration ``transcript_tails_and_own_id_reread``), a
re-run of ``import_opensquilla`` does the same for an imported one. Nothing the gateway wrote
is recomputed: coverage is computed from the entries whenever it is asked.
"""

from django.db import migrations, models

IMPORTED_PREFIX = "opensquilla-import-"


def own_ids_back(apps, schema_editor):
    entry = apps.get_model("sessions_app", "TranscriptEntry")
    manager = entry._base_manager
    # One statement for the many rows stored under their own id.
    manager.exclude(gateway_id="local").update(gateway_entry_id=models.F("id"))
    named = manager.filter(message_id__startswith=IMPORTED_PREFIX).values_list("pk", "message_id")
    for pk, message_id in named.iterator(chunk_size=2000):
        own = message_id[len(IMPORTED_PREFIX) :]
        if own.isdigit():
            manager.filter(pk=pk).update(gateway_entry_id=int(own))


class Migration(migrations.Migration):

    dependencies = [
        ("sessions_app", "0008_gateway_repairs_and_retired_ledger"),
    ]

    operations = [
        migrations.AddField(
            model_name="transcriptentry",
            name="gateway_entry_id",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.RunPython(own_ids_back, migrations.RunPython.noop, elidable=True),
    ]
