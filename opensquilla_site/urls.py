from django.contrib import admin
from django.urls import include, path

from .api import api
from .views import RateLimitedLoginView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/login/", RateLimitedLoginView.as_view(), name="login"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/v1/", api.urls),
    path("", include("operations_app.urls")),
    path("", include("receipts_app.console.urls")),
]

handler404 = "opensquilla_site.views.not_found"
handler500 = "opensquilla_site.views.server_error"
