"""Viewers see states, not hosts: no page or read-scope answer shows a viewer where a gateway's
processes run (host names, node names, pids), where its ledger lives (``sessions.db`` paths) or
its RPC address; an operator reads them all (operations_app/exposure.py,
receipts_app/mirror/exposure.py)."""

from __future__ import annotations

import pytest

from opensquilla_site import timeutil
from operations_app import heartbeats
from receipts_app.mirror.models import MirroredReceipt, MirroredSession, MirrorSource
from sessions_app.gateways import Gateway, ensure_gateway, using_gateway
from tests.api.conftest import operator, reader  # noqa: F401
from tests.console.conftest import operator_client, viewer_client  # noqa: F401
from tests.factories import make_receipt, make_session

pytestmark = pytest.mark.django_db

HOST = "edge-b-host"
PID = "48213"
DB = "/srv/opensquilla-b/state/sessions.db"
RPC = "ws://gw-b.internal:18789/ws"
SECRETS = (HOST, PID, DB, "gw-b.internal", "/srv/opensquilla-b")
PAGES = (
    "/",
    "/fleet/",
    "/operations/liveness/",
    "/operations/gateway-link/",
    "/gateways/b/repairs/",
)
API = ("/gateways", "/health", "/gateways/b/archives")
KEY = "agent:main:webchat:mirrored"


@pytest.fixture
def edge_b(settings):
    settings.OPENSQUILLA_GATEWAY_LINK_HOSTS = ["gw-b.internal"]
    ensure_gateway("b")
    Gateway.objects.filter(name="b").update(source=DB, rpc_address=RPC)
    now = timeutil.now_ms()
    source = MirrorSource.objects.create(
        gateway_id="b",
        path=DB,
        workspace="/srv/opensquilla-b/workspace",
        phase="following",
        heartbeat_at=now,
        lease_owner=f"{HOST}:{PID}",
        lag_ms=0,
        error=f"unable to open {DB}",
        error_code="unreadable",
    )
    worker = {"host": HOST, "pid": int(PID), "gateway": "b", "queues": ["gateway.b"]}
    worker["supervisor"] = {"name": "worker", "restarts": 2}
    heartbeats.mark_started("worker", f"b@{HOST}", worker)
    follower = {"host": HOST, "pid": int(PID), "gateway": "b", "gateways": ["b"]}
    heartbeats.mark_started("mirror", f"mirror-b@{HOST}", follower)
    heartbeats.mark_started("worker", f"celery@{HOST}", {"host": HOST, "pid": int(PID)})
    # A session and a receipt the follower brought from b's sessions.db.
    with using_gateway("b"):
        session = make_session(KEY, messages=2)
        receipt = make_receipt(session_key=KEY, session_id=session.session_id)
    MirroredSession.objects.create(source=source, session_key=KEY)
    MirroredReceipt.objects.create(
        source=source,
        idempotency_key=receipt.idempotency_key,
        source_updated_at=receipt.updated_at,
        source_status=receipt.status,
    )
    return receipt


def _row_pages(receipt) -> list[str]:
    return [f"/receipts/{receipt.receipt_id}/", f"/sessions/s/{KEY}?gateway=b"]


def _leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


@pytest.mark.parametrize("url", PAGES)
def test_a_viewer_reads_no_host_path_or_address_on_any_page(
    edge_b,
    viewer_client,  # noqa: F811
    url,
):
    response = viewer_client.get(url)
    assert response.status_code == 200, url
    assert _leaks(response.content.decode()) == []


@pytest.mark.parametrize("path", API)
def test_a_read_scope_caller_reads_no_host_path_or_address(edge_b, reader, path):  # noqa: F811
    response = reader.get(path)
    assert response.status_code == 200, response.content
    assert _leaks(response.content.decode()) == []


def test_a_mirrored_rows_provenance_names_its_gateway_to_a_viewer_and_its_path_to_an_operator(
    edge_b,
    viewer_client,  # noqa: F811
    operator_client,  # noqa: F811
):
    for url in _row_pages(edge_b):
        page = viewer_client.get(url)
        assert page.status_code == 200, url
        text = page.content.decode()
        assert _leaks(text) == [], url
        assert "Followed live from gateway <code>b</code>'s ledger" in text, url
        assert f'Followed live from <code class="wrap">{DB}</code>' in (
            operator_client.get(url).content.decode()
        ), url


def test_the_viewer_still_reads_every_process_and_its_state(edge_b, viewer_client):  # noqa: F811
    html = viewer_client.get("/operations/liveness/").content.decode()
    processes = html[html.index('id="processes-title"') : html.index('id="mirror-title"')]
    assert "worker · gateway b" in processes and "mirror · gateway b" in processes
    assert processes.count(">running<") == 3


def test_an_operator_reads_the_hosts_paths_and_followers(
    edge_b,
    operator_client,  # noqa: F811
    operator,  # noqa: F811
):
    html = operator_client.get("/operations/liveness/").content.decode()
    assert f"b@{HOST}" in html and f"celery@{HOST}" in html and DB in html
    [state] = [s for s in operator.get("/health").json()["mirror"] if s["gateway"] == "b"]
    assert (state["source"], state["follower"]) == (DB, f"{HOST}:{PID}")
