from __future__ import annotations

import pytest

from tests.conftest import clear_test_cache
from tests.factories import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_cache(settings):
    # Hour windows: a minute window can roll over mid-test on a slow machine and reset a count.
    settings.LOGIN_RATE_PER_IP = "20/h"
    settings.LOGIN_RATE_PER_USER = "5/h"
    clear_test_cache()
    yield
    clear_test_cache()


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


def _fail(client, username: str, **extra):
    return client.post("/accounts/login/", {"username": username, "password": "wrong"}, **extra)


def test_a_look_alike_username_hits_the_same_limit(client):
    make_user("ratetest", "viewer", password="right-Password-1")
    for _ in range(5):
        assert _fail(client, "ratetest").status_code == 200
    # Fullwidth letters: Django's login normalises them (NFKC) to the same user.
    for look_alike in ("ｒａｔｅｔｅｓｔ", "RATETEST", "RateTest "):
        blocked = client.post(
            "/accounts/login/", {"username": look_alike, "password": "right-Password-1"}
        )
        assert blocked.status_code == 429, look_alike
    assert "_auth_user_id" not in client.session


def test_without_a_trusted_proxy_header_every_client_behind_the_proxy_shares_one_ip_budget(
    client, settings
):
    settings.LOGIN_RATE_PER_IP = "3/h"
    for i in range(3):
        _fail(client, f"user{i}", HTTP_X_FORWARDED_FOR=f"203.0.113.{i}")
    assert _fail(client, "user9", HTTP_X_FORWARDED_FOR="203.0.113.99").status_code == 429


def test_a_trusted_proxy_header_gives_each_client_its_own_ip_budget(client, settings):
    settings.LOGIN_RATE_PER_IP = "3/h"
    settings.OPENSQUILLA_TRUSTED_PROXY_HEADER = "X-Forwarded-For"
    for i in range(3):
        _fail(client, f"user{i}", HTTP_X_FORWARDED_FOR="spoofed, 203.0.113.7")
    # The proxy appends the address it saw: a client cannot escape by prepending its own.
    assert _fail(client, "user9", HTTP_X_FORWARDED_FOR="1.2.3.4, 203.0.113.7").status_code == 429
    assert _fail(client, "user9", HTTP_X_FORWARDED_FOR="203.0.113.8").status_code == 200


@pytest.fixture
def clock(monkeypatch):
    """The limiter's clock, moved by hand: no test waits, and none asserts on real time."""
    from opensquilla_site import login_limit

    now = {"t": 1_000_000 * 60 + 59.5}  # half a second before a minute boundary
    monkeypatch.setattr(login_limit.time, "time", lambda: now["t"])
    return now


def test_a_window_boundary_gives_no_fresh_budget(client, settings, clock):
    settings.LOGIN_RATE_PER_USER = "5/m"
    make_user("carol", "viewer", password="right-Password-1")
    for _ in range(5):
        assert _fail(client, "carol").status_code == 200
    clock["t"] += 1  # past the minute boundary: a fixed window would start counting again
    right = {"username": "carol", "password": "right-Password-1"}
    assert client.post("/accounts/login/", right).status_code == 429
    clock["t"] += 30
    assert client.post("/accounts/login/", right).status_code == 429
    # A whole window with no attempt: the budget is back.
    clock["t"] += 62
    assert client.post("/accounts/login/", right).status_code == 302
    assert "_auth_user_id" in client.session


def test_attempts_spread_over_the_window_still_count_together(client, settings, clock):
    settings.LOGIN_RATE_PER_USER = "5/m"
    for _ in range(5):
        assert _fail(client, "dave").status_code == 200
        clock["t"] += 11  # 5 attempts over 55 s, each in a different 10-second stretch
    assert _fail(client, "dave").status_code == 429


@pytest.mark.parametrize(
    "look_alike",
    ["Erin", " erin\t", "ＥＲＩＮ", "e\u0072in", "ERİN".replace("İ", "I")],
)
def test_a_name_and_its_look_alikes_are_one_budget_across_boundaries(
    client, settings, clock, look_alike
):
    settings.LOGIN_RATE_PER_USER = "3/m"
    for _ in range(3):
        assert _fail(client, "erin").status_code == 200
    clock["t"] += 1
    assert _fail(client, look_alike).status_code == 429


def test_rates_parse_and_nonsense_is_refused():
    from opensquilla_site.login_limit import Rate, parse_rate

    assert parse_rate("5/m") == Rate(5, 60)
    assert parse_rate("20/10m") == Rate(20, 600)
    assert parse_rate("3/hour") == Rate(3, 3600)
    with pytest.raises(ValueError):
        parse_rate("lots")
