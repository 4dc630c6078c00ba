"""The console's operations pages, in the ``operations`` namespace."""

from django.urls import path

from . import console_views

app_name = "operations"

urlpatterns = [
    path("liveness/", console_views.liveness, name="liveness"),
    path("time-at-risk/", console_views.time_at_risk_panel, name="time_at_risk"),
    path("gateway-link/", console_views.gateway_link_panel, name="gateway_link"),
    path("alerts/", console_views.alert_list, name="alerts"),
    path("alerts/new/", console_views.alert_edit, name="alert_create"),
    path("alerts/<int:rule_id>/", console_views.alert_edit, name="alert_edit"),
    path("alerts/<int:rule_id>/test/", console_views.alert_send_test, name="alert_test"),
    path(
        "alerts/<int:rule_id>/deliveries/",
        console_views.alert_deliveries,
        name="alert_deliveries",
    ),
]
