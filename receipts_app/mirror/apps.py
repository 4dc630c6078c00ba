from django.apps import AppConfig


class MirrorConfig(AppConfig):
    # Its own app label, so its migrations never interleave with receipts_app's.
    name = "receipts_app.mirror"
    label = "mirror"
    verbose_name = "OpenSquilla mirror"
    default_auto_field = "django.db.models.BigAutoField"
