"""Project package: settings, URLs, the Celery app, the NinjaAPI and shared helpers."""

from .celery import app as celery_app

__all__ = ["celery_app"]
