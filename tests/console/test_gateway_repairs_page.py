"""Who repairs a gateway's rows, on the fleet view, its repairs page and GET /gateways; changed
by an admin only, audited; the archives its upgrade left undistilled listed per agent."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from receipts_app.mirror.models import MirroredReceipt, MirrorSource
from receipts_app.models import ReceiptEvent
from receipts_app.statuses import RETIRED_UPSTREAM
from sessions_app.gateways import Gateway, ensure_gateway, using_gateway
from tests.api.conftest import reader  # noqa: F401
from tests.factories import make_receipt

from .conftest import _client_for

pytestmark = pytest.mark.django_db

KEY = "agent:main:webchat:default"


def _retired_archive(gateway: str, n: int, *, agent: str = "main") -> str:
    """A repair row of ``gateway`` the mirror marked retired by the upgrade, naming an archive."""
    path = f"memory/.raw_fallbacks/2026-09-0{n % 9 + 1}-agent-{agent}-x-{n:016x}.md"
    src, _ = MirrorSource.objects.get_or_create(gateway_id=gateway, path=f"/srv/{gateway}.db")
    with using_gateway(gateway):
        row = make_receipt(
            session_key=f"agent:{agent}:webchat:s{n}",
            scope="repair",
            status=RETIRED_UPSTREAM,
            reason="provider_failed_archived",
            target_path=path,
            idempotency_key=f"flush-receipt:repair:{n}",
        )
    MirroredReceipt.objects.create(
        source=src,
        idempotency_key=row.idempotency_key,
        source_updated_at=row.updated_at,
        source_status="repair_pending",
        retired_at=1,
    )
    return path


@pytest.fixture
def fleet() -> None:
    ensure_gateway("b")
    Gateway.objects.filter(name="b").update(ledger_retired_at=1)
    with using_gateway("b"):
        make_receipt(session_key=KEY, status="checkpoint_failed")
    make_receipt(session_key=KEY, status="checkpoint_failed")


def _fleet_cells(client) -> dict[str, str]:
    """Gateway → who repairs it, as the fleet view's "repairs" cell says."""
    body = client.get(reverse("receipts:fleet")).content.decode()
    cells = re.findall(
        r'<td class="fleet-repairs small" data-repairs="(\w+)"><a href="/gateways/([^/]+)/', body
    )
    return {name: owner for owner, name in cells}


def test_the_fleet_says_who_repairs_each_gateway_and_an_admin_hands_one_over(fleet):
    viewer = _client_for("viewer", "vera")
    operator = _client_for("operator", "otto")
    admin = _client_for("admin", "ada")
    assert _fleet_cells(viewer) == {"b": "gateway", "local": "console"}
    page = viewer.get(reverse("receipts:gateway_repairs", args=["b"])).content.decode()
    assert "repairs: <strong>the gateway&#x27;s own</strong>" in page
    assert 'data-action="repairs-hand-over"' not in page  # a viewer is shown no form
    url = reverse("receipts:gateway_repairs", args=["b"])
    assert operator.post(url, {"repairs": "console"}).status_code == 403
    assert not Gateway.objects.get(name="b").repairs_here

    assert 'data-action="repairs-hand-over"' in admin.get(url).content.decode()
    done = admin.post(url, {"repairs": "console", "reason": "loop off"}, follow=True)
    assert "gateway b: repairs: this console" in done.content.decode()
    assert _fleet_cells(viewer) == {"b": "console", "local": "console"}
    event = ReceiptEvent.objects.get(action="repairs_handover")
    assert (event.actor, event.outcome, event.reason) == ("ada", "console", "loop off")
    assert admin.post(url, {"repairs": "nobody"}).status_code == 400
    assert viewer.get(reverse("receipts:gateway_repairs", args=["nope"])).status_code == 404
    assert viewer.get("/gateways/Bad%20Name/repairs/").status_code == 400


def test_the_gateway_page_lists_the_archives_its_upgrade_left_undistilled(fleet):
    archive = _retired_archive("b", 1)
    other = _retired_archive("b", 2, agent="ops")
    page = (
        _client_for("viewer", "vera")
        .get(reverse("receipts:gateway_repairs", args=["b"]))
        .content.decode()
    )
    assert "ledger retired" in page
    assert "2 receipts retired by the gateway's upgrade to 0.5.5+" in page
    assert f'data-path="{archive}"' in page and f'data-path="{other}"' in page
    assert 'data-agent="main"' in page and 'data-agent="ops"' in page
    assert "Hand this gateway's repairs to this console" in page


def test_gateways_api_says_who_repairs_and_lists_the_archives(fleet, reader):  # noqa: F811
    archive = _retired_archive("b", 1)
    items = {g["name"]: g for g in reader.get("/gateways").json()["items"]}
    assert (items["b"]["repairs"], items["b"]["repairs_label"]) == ("gateway", "the gateway's own")
    assert (items["local"]["repairs"], items["local"]["repairs_label"]) == (
        "console",
        "this console",
    )
    assert items["b"]["ledger_retired_at"] == 1 and items["b"]["retired_receipts"] == 1
    assert items["local"]["ledger_retired_at"] is None and items["local"]["retired_receipts"] == 0
    body = reader.get("/gateways/b/archives").json()
    assert (body["gateway"], body["repairs"]) == ("b", "gateway")
    [group] = body["agents"]
    assert (group["agent_id"], group["count"]) == ("main", 1)
    assert group["archives"][0]["path"] == archive
    assert group["archives"][0]["queued_here"] is None
    assert reader.get("/gateways/nope/archives").status_code == 404
    assert reader.get("/gateways/Bad%20Name/archives").status_code == 422


def test_the_archive_list_costs_the_same_queries_for_ten_archives(fleet, reader):  # noqa: F811
    _retired_archive("b", 1)
    _retired_archive("b", 2)

    def reads() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert reader.get("/gateways/b/archives").status_code == 200
        return len([q for q in ctx.captured_queries if "apitoken" not in q["sql"].lower()])

    two = reads()
    for n in range(3, 11):
        _retired_archive("b", n)
    assert len(reader.get("/gateways/b/archives").json()["agents"][0]["archives"]) == 10
    assert reads() == two
