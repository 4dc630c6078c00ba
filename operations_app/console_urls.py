"""The console's operations pages, in the ``operations`` namespace."""

from django.urls import path

from . import console_views

app_name = "operations"

urlpatterns = [
    path("liveness/", console_views.liveness, name="liveness"),
]
