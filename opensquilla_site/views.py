"""Site-level views: the rate-limited console login and the 404/500 handlers."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse, HttpResponseServerError, JsonResponse
from django.shortcuts import render

from . import login_limit
from .client_ip import client_ip

LOCKOUT_MESSAGE = "Too many sign-in attempts. Wait a minute and try again."


def _login_throttled(request: HttpRequest) -> bool:
    """Count this POST against the per-IP and per-name budgets (sliding windows,
    ``login_limit``); True when over either. Both are counted, whichever refuses."""
    name = login_limit.username_key(request.POST.get("username") or "")
    by_ip = login_limit.attempt(
        "ip", client_ip(request), login_limit.parse_rate(settings.LOGIN_RATE_PER_IP)
    )
    by_user = login_limit.attempt(
        "user", name, login_limit.parse_rate(settings.LOGIN_RATE_PER_USER)
    )
    return by_ip or by_user


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


def _wants_json(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """404 for any URL no route matched: JSON under /api/, a console page elsewhere."""
    if _wants_json(request):
        return JsonResponse({"detail": "Not found.", "code": "not_found"}, status=404)
    context = {
        "title": "Page not found",
        "message": "There is nothing at this address. It may have been mistyped or removed.",
        "fields": {},
    }
    return render(request, "console/error.html", context, status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    """Last-resort 500: never a stack trace; plain HTML so it cannot fail itself."""
    if _wants_json(request):
        return JsonResponse({"detail": "internal error", "code": "internal_error"}, status=500)
    return HttpResponseServerError(
        "<!doctype html><title>Server error</title><h1>Something went wrong</h1>"
        "<p>The error was logged. Try again, or go back to the <a href='/'>overview</a>.</p>",
        content_type="text/html",
    )
