from __future__ import annotations

import pytest
from django.core.cache import cache

from tests.factories import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_cache():
    cache.clear()
    yield
    cache.clear()


def test_repeated_failed_logins_for_one_user_are_refused_even_with_the_right_password(client):
    make_user("alice", "operator", password="right-Password-1")
    for _ in range(5):
        response = client.post("/accounts/login/", {"username": "alice", "password": "wrong"})
        assert response.status_code == 200
    blocked = client.post("/accounts/login/", {"username": "alice", "password": "right-Password-1"})
    assert blocked.status_code == 429
    assert b"Too many sign-in attempts" in blocked.content
    assert "_auth_user_id" not in client.session


def test_a_good_login_within_budget_works(client):
    make_user("bob", "viewer", password="right-Password-1")
    response = client.post("/accounts/login/", {"username": "bob", "password": "right-Password-1"})
    assert response.status_code == 302
    assert "_auth_user_id" in client.session
