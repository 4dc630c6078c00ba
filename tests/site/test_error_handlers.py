from __future__ import annotations

import pytest

from tests.factories import make_user

pytestmark = pytest.mark.django_db


def test_unknown_api_url_is_a_json_404(client):
    response = client.get("/api/v1/no-such-thing")
    assert response.status_code == 404
    assert response.json() == {"detail": "Not found.", "code": "not_found"}


def test_unknown_page_is_a_console_page(client):
    client.force_login(make_user("viewer1", "viewer"))
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert b"Page not found" in response.content


def test_server_error_never_shows_a_trace(rf):
    from opensquilla_site.views import server_error

    api = server_error(rf.get("/api/v1/receipts"))
    assert api.status_code == 500 and b"internal_error" in api.content
    page = server_error(rf.get("/receipts/"))
    assert page.status_code == 500 and b"Traceback" not in page.content


@pytest.mark.parametrize("path", ["/api/v1/receipts/a%00b", "/api/v1/receipts?status=a%00b"])
def test_nul_in_an_api_address_is_a_422(client, path):
    response = client.get(path)
    assert response.status_code == 422
    assert response.json()["code"] == "validation_error"


def test_nul_in_a_page_address_is_a_400_message(client):
    client.force_login(make_user("viewer2", "viewer"))
    response = client.get("/receipts/?reason=x%00y")
    assert response.status_code == 400
    assert b"NUL" in response.content
