"""Read each followed gateway's transcript entries again once, so every entry gets back the own
id an earlier pass may have replaced (sessions_app ``transcript_own_ids``).

Only where that could have happened: a source of a gateway other than ``local`` while entries
of another gateway exist (before own ids, an id another gateway held was renumbered). Its
entries cursor starts again and its transcript fingerprints are dropped (they counted the rows
it applied): the next pass reads the file's entries, finds every one already here by
(session, message id), and writes only the own ids that differ. Nothing else moves.
"""

from django.db import migrations


def reread(apps, schema_editor):
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
        ("mirror", "0005_skipped_rows"),
        ("sessions_app", "0007_transcript_own_ids"),
    ]

    operations = [migrations.RunPython(reread, migrations.RunPython.noop, elidable=True)]
