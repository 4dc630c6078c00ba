"""Site-level views: the rate-limited console login."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse
from django_ratelimit.core import is_ratelimited

LOCKOUT_MESSAGE = "Too many sign-in attempts. Wait a minute and try again."


def _username_key(_group: str, request: HttpRequest) -> str:
    return (request.POST.get("username") or "").strip().lower()


def _login_throttled(request: HttpRequest) -> bool:
    """Count this POST against the per-IP and per-username budgets; True when over either."""
    by_ip = is_ratelimited(
        request,
        group="login-ip",
        key="ip",
        rate=settings.LOGIN_RATE_PER_IP,
        method="POST",
        increment=True,
    )
    by_user = is_ratelimited(
        request,
        group="login-user",
        key=_username_key,
        rate=settings.LOGIN_RATE_PER_USER,
        method="POST",
        increment=True,
    )
    return bool(by_ip or by_user)


class RateLimitedLoginView(auth_views.LoginView):
    """Django's login view, refusing (429) attempts beyond the per-IP and per-user budgets."""

    def post(self, request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if _login_throttled(request):
            form = self.get_form()
            form.errors.clear()
            form.add_error(None, LOCKOUT_MESSAGE)
            response = self.render_to_response(self.get_context_data(form=form))
            response.status_code = 429
            return response
        return super().post(request, *args, **kwargs)
