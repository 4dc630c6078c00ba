from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from .api import api
from .views import RateLimitedLoginView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/login/", RateLimitedLoginView.as_view(), name="login"),
    # Only what the console uses: no mail is configured, so no password reset; Django's
    # LogoutView answers POST only. Passwords are changed by an admin (admin site, CLI).
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", api.urls),
    path("", include("operations_app.urls")),
    path("agents/", include("operations_app.agent_urls")),
    path("", include("receipts_app.console.urls")),
]

handler404 = "opensquilla_site.views.not_found"
handler500 = "opensquilla_site.views.server_error"
