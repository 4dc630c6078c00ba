"""The mirror's state where operators and automation look: the overview and ``GET /health``."""

from __future__ import annotations

import pytest

from receipts_app.mirror.follower import Follower
from receipts_app.mirror.models import MirrorSource

from .opensquilla_source import GROUP_SENDER_KEY, FakeGateway

pytestmark = pytest.mark.django_db


@pytest.fixture
def gateway(tmp_path):
    gw = FakeGateway(tmp_path / "sessions.db")
    gw.add_session(GROUP_SENDER_KEY)
    gw.add_receipt(GROUP_SENDER_KEY, status="checkpoint_failed")
    yield gw
    gw.close()


def following(gateway: FakeGateway) -> Follower:
    f = Follower(
        db_path=gateway.path,
        workspace=None,
        checkpoint_root=None,
        memory_template=None,
        interval=0.1,
        owner="surface-test",
    )
    f.poll()
    return f


def test_health_api_reports_the_mirror_in_sync_then_failing_then_stopped(operator, gateway):
    reader = operator  # operators read the source's path and the follower's raw error
    f = following(gateway)
    [state] = reader.get("/health").json()["mirror"]
    assert state["status"] == "ok" and state["healthy"] is True
    assert state["source"] == str(gateway.path.resolve())
    assert state["last_sync_at"] and state["rows_applied"] == 2

    gateway.close()
    gateway.path.write_bytes(b"garbage" * 200)
    for suffix in ("-wal", "-shm"):
        gateway.path.with_name(gateway.path.name + suffix).unlink(missing_ok=True)
    f.poll()
    [state] = reader.get("/health").json()["mirror"]
    assert (state["status"], state["healthy"], state["error_code"]) == (
        "failing",
        False,
        "not_sqlite",
    )
    assert "is not an SQLite database" in state["error"]

    MirrorSource.objects.update(heartbeat_at=1)
    [state] = reader.get("/health").json()["mirror"]
    assert state["status"] == "stopped"


def test_a_viewer_reads_the_mirrors_state_without_paths_hosts_or_raw_errors(reader, gateway):
    f = following(gateway)
    gateway.close()
    gateway.path.write_bytes(b"garbage" * 200)
    for suffix in ("-wal", "-shm"):
        gateway.path.with_name(gateway.path.name + suffix).unlink(missing_ok=True)
    f.poll()
    [state] = reader.get("/health").json()["mirror"]
    assert (state["status"], state["error_code"]) == ("failing", "not_sqlite")
    assert (state["source"], state["workspace"], state["follower"], state["error"]) == (
        "",
        "",
        "",
        "",
    )
    listed = reader.get("/gateways").json()["items"]
    assert str(gateway.path.parent) not in str(listed)


def test_health_api_without_a_mirror_has_an_empty_list(reader):
    assert reader.get("/health").json()["mirror"] == []


def test_overview_shows_a_failing_mirror_at_a_glance(viewer_client, operator_client, gateway):
    f = following(gateway)
    page = viewer_client.get("/").content.decode()
    assert "OpenSquilla mirror" in page and "in sync" in page

    gateway.close()
    gateway.path.unlink()
    f.poll()
    page = viewer_client.get("/").content.decode()
    assert "failing" in page
    assert "Local history is kept" in page
    # A viewer reads the state, not the sessions.db path (nor the raw error quoting it).
    assert str(gateway.path.parent) not in page
    assert str(gateway.path.parent) not in viewer_client.get("/operations/liveness/").text
    operators = operator_client.get("/").content.decode()
    assert f"{gateway.path.resolve()} does not exist" in operators
    assert str(gateway.path.resolve()) in operator_client.get("/operations/liveness/").text


def test_overview_says_when_the_configured_follower_never_started(viewer_client, settings):
    settings.OPENSQUILLA_SOURCE_DB = "/srv/opensquilla/state/sessions.db"
    page = viewer_client.get("/").content.decode()
    assert "stopped" in page and "no follower has started" in page


def test_overview_without_a_mirror_shows_no_mirror_panel(viewer_client):
    assert "OpenSquilla mirror" not in viewer_client.get("/").content.decode()


def test_a_stopped_mirror_reports_a_lag_that_grows_for_metrics_and_alerts(gateway):
    following(gateway)
    MirrorSource.objects.update(heartbeat_at=1, last_sync_at=1, lag_ms=40)
    from receipts_app.mirror.state import mirror_states

    [state] = mirror_states()
    assert state["status"] == "stopped"
    assert state["lag_seconds"] > 1_000_000  # since epoch ms 1: far behind, not 0.04 s
    assert state["checked_at"] == 1


def test_operations_reads_the_mirror_through_mirror_states(gateway):
    from operations_app.mirror import mirror_views

    following(gateway)
    [view] = mirror_views()
    assert (view.source, view.state) == (str(gateway.path.resolve()), "ok")
    assert view.checked_at is not None and view.lag_seconds is not None
