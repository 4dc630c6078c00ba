"""The fleet view on the overview (one row per gateway, each count a link to exactly the rows
it counts), the gateway filter of every console list, and plans that keep their gateway.

Through HTTP, as an operator meets it: render the page, read each count beside its link,
follow the link and count the rows the list shows.
"""

from __future__ import annotations

import html
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from receipts_app.audit import Actor, record_event
from receipts_app.models import MemoryDurableReceipt, RequeuePlan
from receipts_app.requeue import create_requeue_plan
from sessions_app.gateways import ensure_gateway, using_gateway
from tests.factories import make_receipt, make_session

from .conftest import hx

pytestmark = pytest.mark.django_db

KEY = "agent:main:webchat:default"
FLEET = re.compile(r'<section class="panel fleet"')
FLEET_ROW = re.compile(
    r'<tr class="fleet-row[^"]*" data-gateway="(?P<name>[^"]+)"(?P<attrs>[^>]*)>(?P<body>.*?)</tr>',
    re.S,
)
LINK = re.compile(
    r'<a class="fleet-link[^"]*" data-count="(?P<what>\w+)" href="(?P<href>[^"]+)">'
    r"(?P<count>[\d,]+) [^<]+</a>"
)
ROW = re.compile(r'<tr class="receipt-row')
FLEET_ROW_NAMES = re.compile(r'<tr class="fleet-row[^"]*" data-gateway="([^"]+)"')


def _fleet(client, query: str = "") -> dict[str, dict]:
    """The fleet view as the overview loads it (its own fragment, after the page)."""
    overview = client.get(f"/{query}").content.decode()
    slot = re.search(r'<div id="fleet" hx-get="([^"]+)"', overview)
    assert slot, "the overview has no fleet slot"
    body = client.get(html.unescape(slot[1]), **hx("fleet")).content.decode()
    rows = {}
    for row in FLEET_ROW.finditer(body):
        links = {
            m["what"]: (int(m["count"].replace(",", "")), html.unescape(m["href"]))
            for m in LINK.finditer(row["body"])
        }
        rows[row["name"]] = {"links": links, "body": row["body"], "attrs": row["attrs"]}
    return rows


def _listed(client, href: str) -> list[str]:
    response = client.get(href + "&limit=200" if "?" in href else href + "?limit=200")
    assert response.status_code == 200, href
    return re.findall(
        r'<tr class="receipt-row[^"]*" data-receipt-id="([^"]+)"', response.content.decode()
    )


def _fill(gateway: str, *, failed: int, queued: int, given_up: int, saved: int = 1) -> None:
    with using_gateway(gateway):
        for i in range(failed):
            make_receipt(session_key=KEY, status="checkpoint_failed", reason=f"disk {i}")
        make_receipt(session_key=KEY, status="checkpoint_requeued")  # at risk until recovered
        for _ in range(queued):
            make_receipt(session_key=KEY, scope="repair", status="repair_pending")
        make_receipt(session_key=KEY, scope="repair", status="repair_running")  # claimed
        for _ in range(given_up):
            make_receipt(session_key=KEY, scope="repair", status="repair_abandoned")
        for _ in range(saved):
            make_receipt(session_key=KEY, status="checkpoint_saved")


@pytest.fixture
def two_gateways():
    ensure_gateway("edge", opensquilla_version="0.3.0", schema_version="V014")
    _fill("local", failed=1, queued=2, given_up=0)
    _fill("edge", failed=3, queued=1, given_up=2, saved=4)


# --- the fleet view -------------------------------------------------------------------------


def test_a_single_gateway_overview_has_no_fleet_view(viewer_client):
    make_receipt(session_key=KEY, status="checkpoint_failed")
    body = viewer_client.get("/").content.decode()
    assert re.search(r"Agent <a [^>]*><code>main</code></a>", body)  # the overview as before
    assert _fleet(viewer_client) == {}
    assert viewer_client.get("/fleet/", **hx("fleet")).content.decode().strip() == ""
    # and no gateway select on its lists: there is nothing to choose
    assert 'name="gateway"' not in viewer_client.get("/receipts/").content.decode()


def test_the_fleet_opened_directly_is_a_page_with_the_header_and_its_gateways(viewer_client):
    """A bookmark or the header's "Gateways" link: the console's page around the fleet, the
    single gateway of a first run listed too (the overview's htmx load still gets nothing)."""
    make_receipt(session_key=KEY, status="checkpoint_failed")
    body = viewer_client.get("/fleet/").content.decode()
    assert "<!doctype html>" in body and '<nav aria-label="Main">' in body
    assert re.search(r'<a href="/fleet/" aria-current="page">Gateways</a>', body)
    assert set(FLEET_ROW_NAMES.findall(body)) == {"local"}
    assert "1 gateway in one console" in body
    # and every console page's header links to it
    assert '<a href="/fleet/" >Gateways</a>' in viewer_client.get("/receipts/").content.decode()


def test_every_fleet_count_links_to_exactly_the_rows_it_counts(viewer_client, two_gateways):
    fleet = _fleet(viewer_client)
    assert set(fleet) == {"local", "edge"}
    edge, local = fleet["edge"]["links"], fleet["local"]["links"]
    # at risk: failures waiting for an operator (abandoned repairs too) and requeued checkpoints
    assert edge["memory_at_risk"][0] == 3 + 1 + 2 and local["memory_at_risk"][0] == 1 + 1
    assert edge["repair_backlog"][0] == 1 and local["repair_backlog"][0] == 2
    assert edge["terminal_repairs"][0] == 2 and local["terminal_repairs"][0] == 0
    assert edge["receipts"][0] == 3 + 1 + 1 + 1 + 2 + 4
    for name, row in fleet.items():
        for what, (count, href) in row["links"].items():
            ids = _listed(viewer_client, href)
            assert len(ids) == count, f"{name} {what}: {href}"
            gateways = set(
                MemoryDurableReceipt.objects.filter(receipt_id__in=ids).values_list(
                    "gateway_id", flat=True
                )
            )
            assert gateways <= {name}, f"{name} {what} lists another gateway's rows"


def test_the_fleet_says_version_schema_and_mirror(viewer_client, two_gateways):
    fleet = _fleet(viewer_client)
    assert "0.3.0" in fleet["edge"]["body"] and "V014" in fleet["edge"]["body"]
    assert "not followed" in fleet["local"]["body"]
    assert "at risk</strong>" in fleet["edge"]["body"]


def test_the_fleet_and_the_gateways_api_agree(viewer_client, two_gateways):
    """One service counts both (receipts_app.gateways.fleet)."""
    from receipts_app.gateways import fleet

    api = {g["name"]: g for g in fleet()}
    for name, row in _fleet(viewer_client).items():
        for what in ("memory_at_risk", "repair_backlog", "terminal_repairs"):
            assert row["links"][what][0] == api[name]["at_risk"][what]["count"]


def test_a_scoped_overview_keeps_the_whole_fleet_and_marks_its_gateway(viewer_client, two_gateways):
    fleet = _fleet(viewer_client, "?gateway=edge")
    assert set(fleet) == {"local", "edge"}
    assert (
        "aria-current" in fleet["edge"]["attrs"] and "aria-current" not in fleet["local"]["attrs"]
    )
    scoped = viewer_client.get("/fleet/?gateway=edge", **hx("fleet")).content.decode()
    assert "show every gateway" in scoped
    body = viewer_client.get("/?gateway=edge").content.decode()
    # the overview's own counts are edge's, and its status links stay in edge
    assert "?status=checkpoint_failed&amp;gateway=edge" in body
    assert _listed(viewer_client, "/receipts/?status=checkpoint_failed&gateway=edge")
    assert len(_listed(viewer_client, "/receipts/?status=checkpoint_failed&gateway=edge")) == 3


def test_the_fleet_view_costs_the_same_queries_for_ten_gateways(viewer_client, two_gateways):
    def count(url: str) -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert viewer_client.get(url).status_code == 200
        return len(ctx.captured_queries)

    def count_fragment(url: str) -> int:  # as the overview loads it
        with CaptureQueriesContext(connection) as ctx:
            assert viewer_client.get(url, **hx("fleet")).status_code == 200
        return len(ctx.captured_queries)

    urls = ("/", "/?gateway=edge", "/fleet/", "/fleet/?gateway=edge")
    two = [count(url) for url in urls]
    fragment = [count_fragment(url) for url in urls[2:]]
    for n in range(8):
        ensure_gateway(f"edge-{n}", opensquilla_version="0.5.3")
        _fill(f"edge-{n}", failed=1, queued=1, given_up=1)
    assert len(_fleet(viewer_client)) == 10
    ten = [count(url) for url in urls]
    assert ten == two
    assert max(ten) <= 8
    assert [count_fragment(url) for url in urls[2:]] == fragment


# --- the gateway filter on every list --------------------------------------------------------

LISTS = [
    "/",
    "/fleet/",
    "/receipts/",
    "/receipts/?status=checkpoint_failed",
    "/sessions/",
    "/audit/",
    "/plans/",
]


@pytest.mark.parametrize("url", LISTS)
def test_an_unknown_gateway_is_a_message_not_a_500(viewer_client, two_gateways, url):
    sep = "&" if "?" in url else "?"
    response = viewer_client.get(f"{url}{sep}gateway=nowhere")
    assert response.status_code == 404
    body = response.content.decode()
    assert "No gateway is named &#x27;nowhere&#x27;" in body and "edge" in body
    bad = viewer_client.get(f"{url}{sep}gateway=Not%20A%20Slug")
    assert bad.status_code == 400 and "is not a slug" in bad.content.decode()


def test_an_unknown_gateway_in_an_htmx_swap_is_a_message(viewer_client, two_gateways):
    response = viewer_client.get("/receipts/?gateway=nowhere", **hx("receipt-table"))
    assert response.status_code == 404 and response["HX-Retarget"] == "#messages"


def test_an_anonymous_visitor_learns_nothing_about_gateways(client, two_gateways):
    response = client.get("/receipts/?gateway=nowhere")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


@pytest.mark.parametrize("url", ["/receipts/", "/sessions/", "/audit/", "/plans/"])
def test_every_list_has_a_gateway_select_that_keeps_the_choice(viewer_client, two_gateways, url):
    body = viewer_client.get(f"{url}?gateway=edge").content.decode()
    select = re.search(r'<select name="gateway"[^>]*>(.*?)</select>', body, re.S)
    assert select, url
    options = re.findall(r'<option value="([^"]*)"( selected)?', select[1])
    assert [v for v, _ in options] == ["", "edge", "local"]
    assert [v for v, sel in options if sel] == ["edge"]


def test_the_sessions_list_filters_by_gateway(viewer_client, two_gateways):
    local = make_session(KEY, messages=1)
    with using_gateway("edge"):
        edge = make_session(KEY, messages=1)
    body = viewer_client.get("/sessions/?gateway=edge").content.decode()
    assert edge.session_id[:8] in body and local.session_id[:8] not in body


def test_the_audit_log_filters_by_gateway(viewer_client, two_gateways):
    mine = MemoryDurableReceipt.objects.filter(gateway_id="local").first()
    theirs = MemoryDurableReceipt.objects.filter(gateway_id="edge").first()
    for row in (mine, theirs):
        record_event(
            receipt_id=row.receipt_id,
            action="acknowledge",
            actor=Actor(f"by-{row.gateway_id}", "console"),
            gateway=row.gateway_id,
        )
    body = viewer_client.get("/audit/?gateway=edge").content.decode()
    assert "by-edge" in body and "by-local" not in body
    every = viewer_client.get("/audit/").content.decode()
    assert "by-edge" in every and "by-local" in every


def test_the_plans_list_filters_by_gateway_and_says_each_plans_gateway(viewer_client, two_gateways):
    actor = Actor("otto", "console")
    edge = create_requeue_plan(
        filters={"status": "repair_abandoned", "gateway": "edge"}, receipt_ids=None, actor=actor
    )
    every = create_requeue_plan(
        filters={"status": "checkpoint_failed"}, receipt_ids=None, actor=actor
    )
    body = viewer_client.get("/plans/?gateway=edge").content.decode()
    assert edge.plan_id[:8] in body and every.plan_id[:8] not in body
    listed = viewer_client.get("/plans/").content.decode()
    assert every.plan_id[:8] in listed and "every gateway" in listed
    detail = viewer_client.get(f"/plans/{edge.plan_id}/").content.decode()
    assert '<p class="plan-gateway">Gateway: ' in detail and "<strong>edge</strong>" in detail


# --- a plan keeps its gateway -----------------------------------------------------------------


def _abandoned(gateway: str) -> MemoryDurableReceipt:
    with using_gateway(gateway):
        return make_receipt(
            session_key=KEY, scope="repair", status="repair_abandoned", reason="provider down"
        )


def test_a_plan_made_in_a_gateway_only_touches_its_rows_even_if_others_match_later(
    operator_client, settings, django_capture_on_commit_callbacks
):
    settings.CELERY_TASK_ALWAYS_EAGER = True
    ensure_gateway("b")
    ours = [_abandoned("b") for _ in range(2)]
    # The list as the operator saw it: gateway b's abandoned repairs, "select all matching".
    page = operator_client.get("/receipts/?gateway=b&status=repair_abandoned").content.decode()
    hidden = dict(
        re.findall(r'<input type="hidden" name="(gateway|status)" value="([^"]+)">', page)
    )
    assert hidden == {"gateway": "b", "status": "repair_abandoned"}
    operator_client.post("/plans/new/", {**hidden, "all_matching": "1"})
    plan = RequeuePlan.objects.get()
    assert plan.filters["gateway"] == "b" and plan.total == 2
    later = [_abandoned("local") for _ in range(3)]  # a's rows that match the status later
    with django_capture_on_commit_callbacks(execute=True):
        operator_client.post(reverse("receipts:plan_execute", args=[plan.plan_id]))
    plan.refresh_from_db()
    assert plan.state == "done" and plan.processed == 2
    moved = MemoryDurableReceipt.objects.filter(pk__in=[r.pk for r in ours])
    assert "repair_abandoned" not in set(moved.values_list("status", flat=True))
    untouched = MemoryDurableReceipt.objects.filter(pk__in=[r.pk for r in later])
    assert set(untouched.values_list("status", flat=True)) == {"repair_abandoned"}


def test_a_plan_made_inside_a_gateway_freezes_it_even_when_its_filter_does_not(db):
    ensure_gateway("b")
    _abandoned("b")
    _abandoned("local")
    with using_gateway("b"):
        plan = create_requeue_plan(
            filters={"status": "repair_abandoned"}, receipt_ids=None, actor=Actor("x", "api")
        )
        from opensquilla_site.exceptions import ValidationFailed

        with pytest.raises(ValidationFailed):  # the gateway alone is no selection
            create_requeue_plan(filters={}, receipt_ids=None, actor=Actor("x", "api"))
        with pytest.raises(ValidationFailed):  # and a filter cannot name another gateway
            create_requeue_plan(
                filters={"gateway": "local", "status": "repair_abandoned"},
                receipt_ids=None,
                actor=Actor("x", "api"),
            )
    assert plan.filters == {"status": ["repair_abandoned"], "gateway": "b"} and plan.total == 1


def test_checked_rows_keep_the_gateway_of_their_list(operator_client):
    ensure_gateway("b")
    row = _abandoned("b")
    operator_client.post(
        "/plans/new/", {"selected": [row.receipt_id], "gateway": "b", "status": "repair_abandoned"}
    )
    plan = RequeuePlan.objects.get()
    assert plan.filters == {"gateway": "b"} and plan.receipt_ids == [row.receipt_id]
    assert plan.total == 1


def test_the_fleet_says_a_gateways_mirror_stopped_and_its_lag(viewer_client, two_gateways):
    from receipts_app.mirror.models import MirrorSource

    # No heartbeat ever: the follower is not running, whatever its last lag said.
    MirrorSource.objects.create(gateway_id="edge", path="/srv/edge/sessions.db", lag_ms=1500)
    edge = _fleet(viewer_client)["edge"]["body"]
    assert ">stopped</span>" in edge and "lag 1.5 s" in edge
    from receipts_app.gateways import fleet

    summary = {g["name"]: g["mirror_summary"] for g in fleet()}
    assert summary["edge"]["status"] == "stopped" and summary["edge"]["lag_ms"] == 1500
    assert summary["local"]["status"] is None
