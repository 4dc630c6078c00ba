"""The agent pages (``/agents/<agent>/``), in the ``agents`` namespace."""

from django.urls import path

import opensquilla_site.schemas  # noqa: F401 - registers the "anytext" path converter

from . import agent_views

app_name = "agents"

urlpatterns = [
    # The longer route first: anytext matches '/' too (a stored id renders whatever it holds).
    path(
        "<anytext:agent_id>/gateway-repairs/",
        agent_views.agent_gateway_repairs,
        name="gateway_repairs",
    ),
    path("<anytext:agent_id>/", agent_views.agent_detail, name="detail"),
]
