"""Two changes to what the mirror holds of a followed file's transcripts.

1. **Tails.** Each session's fingerprint also keeps its tail's (the rows after ``tail_from``),
   which a pass compares instead of the whole session (receipts_app.mirror.sync). A stored
   fingerprint starts with the whole session as its tail; the next pass that touches the
   session shortens it.
2. **Own ids read again.** Before own ids (sessions_app ``transcript_own_ids``) a followed
   gateway's entry whose id another gateway held was stored under another id. Where that could
   have happened (a source of a gateway other than ``local`` while entries of another gateway
   exist), the source's entries cursor starts again and its fingerprints are dropped: the next
   pass reads the file's entries, finds every one already here by (session, message id) and
   writes back only the own ids that differ. Nothing else moves; nothing is recomputed.
"""

from django.db import migrations, models


def tails_are_whole(apps, schema_editor):
    transcript = apps.get_model("mirror", "MirroredTranscript")
    transcript.objects.update(
        tail_from=0,
        tail_count=models.F("entry_count"),
        tail_native=models.F("native"),
        tail_digest=models.F("digest"),
    )


def reread_for_own_ids(apps, schema_editor):
    source = apps.get_model("mirror", "MirrorSource")
    transcript = apps.get_model("mirror", "MirroredTranscript")
    entry = apps.get_model("sessions_app", "TranscriptEntry")
    holders = set(entry._base_manager.values_list("gateway_id", flat=True).distinct())
    for src in source.objects.exclude(gateway_id="local"):
        if not holders - {src.gateway_id}:
            continue  # no other gateway's entry could have taken one of its ids
        transcript.objects.filter(source_id=src.pk).delete()
        source.objects.filter(pk=src.pk).update(entries_id=0)


class Migration(migrations.Migration):
    dependencies = [
        ("mirror", "0006_receipt_retired_by_upgrade"),
        ("sessions_app", "0009_transcript_own_ids"),
    ]

    operations = [
        migrations.AddField(
            model_name="mirroredtranscript",
            name="tail_count",
            field=models.IntegerField(default=0),
        ),
        migrations.AddField(
            model_name="mirroredtranscript",
            name="tail_digest",
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="mirroredtranscript",
            name="tail_from",
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="mirroredtranscript",
            name="tail_native",
            field=models.BigIntegerField(default=0),
        ),
        migrations.RunPython(tails_are_whole, migrations.RunPython.noop, elidable=True),
        migrations.RunPython(reread_for_own_ids, migrations.RunPython.noop, elidable=True),
    ]
