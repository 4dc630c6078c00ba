from django.apps import AppConfig


class OpenSquillaSiteConfig(AppConfig):
    name = "opensquilla_site"
    verbose_name = "Site"
    default_auto_field = "django.db.models.BigAutoField"
