"""Production headers and the accounts URLs that remain.

A strict Content-Security-Policy on every page (nothing inline, nothing from elsewhere), and no
template that would need more; ``Cache-Control: private, no-store`` on every page and API
answer; the API docs and schema closed to anonymous callers in production; no password reset
(no mail is configured) and a logout that only POST reaches.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

from opensquilla_site.tokens import create_api_token
from tests.factories import make_receipt, make_session, make_user

pytestmark = pytest.mark.django_db

INLINE = [
    (re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*application/json)[^>]*>", re.I), "inline script"),
    (re.compile(r"<style\b", re.I), "style element"),
    (re.compile(r"\sstyle\s*=", re.I), "style attribute"),
    (re.compile(r"\son[a-z]+\s*=", re.I), "on* handler"),
    (re.compile(r"javascript:", re.I), "javascript: URL"),
    # htmx evaluates these as strings (Function/eval), which script-src 'self' refuses.
    (re.compile(r"hx-trigger=[\"'][^\"']*\[", re.I), "hx-trigger filter"),
    (re.compile(r"\shx-on", re.I), "hx-on handler"),
    (re.compile(r"hx-vals=[\"']\s*(js|javascript):", re.I), "hx-vals script"),
]


def _inline_problems(html: str) -> list[str]:
    return [what for pattern, what in INLINE if pattern.search(html)]


@pytest.fixture
def admin_web() -> Client:
    make_user("ada", "admin")
    web = Client()
    web.login(username="ada", password="pw-Secret-123")
    return web


def test_no_template_of_the_project_has_inline_script_style_or_handlers():
    templates = Path(settings.BASE_DIR) / "templates"
    found = {
        str(path.relative_to(templates)): problems
        for path in templates.rglob("*.html")
        if (problems := _inline_problems(path.read_text()))
    }
    assert found == {}


def _pages(admin_web) -> list[str]:
    row = make_receipt(status="checkpoint_failed")
    session = make_session("agent:main:webchat:headers", messages=2)
    return [
        "/",
        "/receipts/",
        f"/receipts/{row.receipt_id}/",
        "/plans/",
        "/audit/",
        "/sessions/",
        f"/sessions/s/{session.session_key}",
        f"/session-memory/?key={session.session_key}",
        "/operations/liveness/",
        "/operations/alerts/",
        "/admin/",
        "/admin/receipts_app/memorydurablereceipt/",
        f"/admin/receipts_app/memorydurablereceipt/{row.pk}/change/",
        "/api/v1/docs",
    ]


def test_every_page_has_a_strict_csp_private_no_store_and_nothing_inline(admin_web):
    for url in _pages(admin_web):
        response = admin_web.get(url)
        assert response.status_code == 200, url
        policy = response["Content-Security-Policy"]
        assert "default-src 'self'" in policy and "script-src 'self'" in policy, url
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy, url
        assert "frame-ancestors 'none'" in policy
        cache = response["Cache-Control"]
        assert "private" in cache and "no-store" in cache, url
        html = response.content.decode()
        assert _inline_problems(html) == [], url
        assert "//cdn" not in html and "https://" not in html.split("<body", 1)[0], url


def test_the_login_page_is_not_stored_either(client):
    response = client.get("/accounts/login/")
    assert "no-store" in response["Cache-Control"]
    assert "default-src 'self'" in response["Content-Security-Policy"]


def test_api_answers_are_private_no_store():
    user = make_user("reader", "viewer")
    _token, plaintext = create_api_token(user=user, name="t", scope="read")
    response = Client().get("/api/v1/receipts", headers={"Authorization": f"Bearer {plaintext}"})
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"] and "private" in response["Cache-Control"]


SECURITY_HEADERS = (
    "Content-Security-Policy",
    "X-Content-Type-Options",
    "Referrer-Policy",
    "X-Frame-Options",
    "Cross-Origin-Opener-Policy",
)


@pytest.mark.parametrize(
    "method,path",
    [
        ("get", "/healthz"),  # answered before every other middleware
        ("get", "/readyz"),
        ("get", "/metrics"),  # 401 without a token
        ("get", "/no-such-page/"),  # the 404 handler
        ("get", "/api/v1/no-such-route"),
        ("delete", "/api/v1/health"),  # 405, rewritten to JSON
        ("get", "/receipts/?agent=%00"),  # the NUL refusal
        ("get", "/accounts/login/"),
    ],
)
def test_every_answer_carries_the_pages_security_headers(client, method, path):
    response = getattr(client, method)(path)
    missing = [h for h in SECURITY_HEADERS if h not in response]
    assert missing == [], (path, response.status_code)
    assert "default-src 'self'" in response["Content-Security-Policy"]
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["X-Frame-Options"] == "DENY"
    assert "no-store" in response["Cache-Control"], path


def test_static_files_keep_their_caching_and_get_the_security_headers(rf):
    from django.http import HttpResponse

    from opensquilla_site.headers import SecurityHeadersMiddleware

    immutable = "max-age=315360000, public, immutable"
    middleware = SecurityHeadersMiddleware(
        lambda request: HttpResponse(headers={"Cache-Control": immutable})
    )
    response = middleware(rf.get("/static/console/console.css"))
    assert response["Cache-Control"] == immutable
    assert [h for h in SECURITY_HEADERS if h not in response] == []


def test_in_production_the_api_docs_and_schema_need_a_login_or_token(settings):
    settings.OPENSQUILLA_PUBLIC_API_DOCS = False
    anonymous = Client()
    schema = anonymous.get("/api/v1/openapi.json")
    assert schema.status_code == 401
    assert schema.json()["code"] == "unauthorized"
    docs = anonymous.get("/api/v1/docs")
    assert docs.status_code == 302 and docs["Location"].startswith("/accounts/login/")

    user = make_user("reader", "viewer")
    _token, plaintext = create_api_token(user=user, name="t", scope="read")
    bearer = {"Authorization": f"Bearer {plaintext}"}
    assert anonymous.get("/api/v1/openapi.json", headers=bearer).status_code == 200
    bad = {"Authorization": "Bearer osq_nope_nope"}
    assert anonymous.get("/api/v1/openapi.json", headers=bad).status_code == 401
    browser = Client()
    browser.login(username="reader", password="pw-Secret-123")
    assert browser.get("/api/v1/docs").status_code == 200
    assert browser.get("/api/v1/openapi.json").status_code == 200


def test_production_defaults_close_the_docs(tmp_path):
    from tests.security.test_deploy_settings import PRODUCTION, manage, random_secret

    result = manage(
        [
            "shell",
            "-c",
            "from django.conf import settings; print(settings.OPENSQUILLA_PUBLIC_API_DOCS)",
        ],
        tmp_path,
        DJANGO_SECRET_KEY=random_secret(),
        OPENSQUILLA_PUBLIC_API_DOCS=None,
        **PRODUCTION,
    )
    assert result.stdout.strip().splitlines()[-1] == "False", result.stderr


@pytest.mark.parametrize(
    "url",
    [
        "/accounts/password_reset/",
        "/accounts/password_reset/done/",
        "/accounts/reset/MQ/set-password/",
        "/accounts/reset/done/",
        "/accounts/password_change/",
    ],
)
def test_password_reset_and_change_pages_are_gone(client, url):
    assert client.get(url).status_code == 404
    assert client.post(url, {"email": "a@example.com"}).status_code == 404


def test_logout_is_post_only(admin_web):
    assert admin_web.get("/accounts/logout/").status_code == 405
    assert "_auth_user_id" in admin_web.session
    assert admin_web.post("/accounts/logout/").status_code == 302
    assert "_auth_user_id" not in admin_web.session
