"""The Celery app. Tasks are discovered from the installed apps' ``tasks`` modules."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opensquilla_site.settings")

app = Celery("opensquilla_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
