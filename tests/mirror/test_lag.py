"""Mirror lag means one thing: how long the oldest change at the source waited to be applied
here, 0 when caught up; the same in the state, the fleet, ``/metrics`` and the API."""

from __future__ import annotations

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from opensquilla_site.tokens import create_api_token
from receipts_app.gateways import fleet
from receipts_app.mirror.follower import Follower
from receipts_app.mirror.state import mirror_states
from tests.factories import make_user

from .opensquilla_source import GROUP_SENDER_KEY, FakeGateway

pytestmark = pytest.mark.django_db
MINUTE_MS = 60_000


@pytest.fixture
def gateway(tmp_path):
    gw = FakeGateway(tmp_path / "sessions.db")
    yield gw
    gw.close()


@pytest.fixture
def token(db) -> str:
    return create_api_token(user=make_user("scraper", "viewer"), name="t", scope="read")[1]


def lags_everywhere(token: str) -> dict[str, float | None]:
    """Gateway c's lag as each surface reports it."""
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    [state] = mirror_states()
    [row] = [g for g in fleet() if g["name"] == "c"]
    api = Client().get("/api/v1/gateways", **auth).json()["items"]
    [summary] = [g["mirror_summary"] for g in api if g["name"] == "c"]
    metrics = Client().get("/metrics", **auth).content.decode()
    [metric] = [
        s.value
        for family in text_string_to_metric_families(metrics)
        for s in family.samples
        if s.name == "opensquilla_mirror_lag_seconds" and s.labels["gateway"] == "c"
    ]
    return {
        "state": state["lag_seconds"],
        "fleet": row["mirror_summary"]["lag_seconds"],
        "api": summary["lag_seconds"],
        "metrics": metric,
    }


def test_an_idle_caught_up_gateway_reads_lag_0_everywhere(gateway, token):
    # A gateway last written a few minutes before its first import.
    gateway.add_session(GROUP_SENDER_KEY)
    old = gateway.stamp() - 3 * MINUTE_MS
    gateway.add_receipt(GROUP_SENDER_KEY, created_at=old, updated_at=old)
    follower = Follower(
        db_path=gateway.path,
        workspace=None,
        checkpoint_root=None,
        memory_template=None,
        interval=0.1,
        owner="lag-test",
        gateway="c",
    )
    assert follower.poll() == "synced"  # the initial import: everything there is applied
    assert set(lags_everywhere(token).values()) == {0}

    # A change that waited two minutes upstream before this pass applied it...
    waited = gateway.stamp() - 2 * MINUTE_MS
    gateway.add_receipt(GROUP_SENDER_KEY, created_at=waited, updated_at=waited)
    assert follower.poll() == "synced"
    lags = lags_everywhere(token)
    assert len(set(lags.values())) == 1 and lags["state"] >= 120  # one figure, as it waited

    # ...and the next look finds nothing new: caught up again, lag 0 without another write.
    assert follower.poll() == "idle"
    assert set(lags_everywhere(token).values()) == {0}
