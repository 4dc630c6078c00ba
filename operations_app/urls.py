"""Probe and metrics URLs (site root), and the console's operations pages."""

from django.urls import include, path

from . import metrics_views, probe_views

urlpatterns = [
    path("healthz", probe_views.healthz, name="healthz"),
    path("readyz", probe_views.readyz, name="readyz"),
    path("metrics", metrics_views.metrics, name="metrics"),
    path("operations/", include("operations_app.console_urls")),
]
