"""The Celery app. Tasks are discovered from the installed apps' ``tasks`` modules."""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import beat_init, celeryd_init, import_modules

from . import embedded_broker

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "opensquilla_site.settings")
# ``sqlite:///…`` broker URLs (the embedded default) reach the project's transport.
embedded_broker.register()

app = Celery("opensquilla_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@celeryd_init.connect
@beat_init.connect
@import_modules.connect
def _create_runtime_dirs(**_kwargs: object) -> None:
    """The worker and beat write under ``var/`` (broker file, results, beat schedule).

    ``import_modules`` is the first signal beat sends: it opens its schedule file (under
    ``OPENSQUILLA_VAR_DIR``) before ``beat_init``, so a var dir that does not exist yet is made
    here."""
    from .runtime import ensure_runtime_dirs

    ensure_runtime_dirs()
