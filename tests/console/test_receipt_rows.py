"""The receipts list's rows as computed once in Python (receipts_app.console.receipt_rows): the
same links ``{% url %}`` made, the same cut texts, the gateway on every row when the list
spans gateways, and keys that wrap only after a ``:``."""

from __future__ import annotations

import html
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from receipts_app.console.keys import wrapped_key
from receipts_app.console.receipt_rows import present_rows
from receipts_app.models import MemoryDurableReceipt
from sessions_app.gateways import ensure_gateway, using_gateway
from tests.factories import make_receipt, make_session

pytestmark = pytest.mark.django_db

ODD = ["#hash 1", "with space", "slash/only", 'quote\'s "double"', "ünïcødé ✓", "pct%41", "a?b&c"]


def test_row_links_are_the_links_reverse_makes_for_odd_ids():
    for i, rid in enumerate(ODD):
        make_receipt(receipt_id=rid, session_key=f"agent:main:odd {rid}", turn_id=f"t{i}")
    rows = present_rows(list(MemoryDurableReceipt.objects.all()))
    assert len(rows) == len(ODD)
    for row in rows:
        assert row.detail_url == reverse("receipts:detail", args=[row.receipt_id])
        assert row.requeue_url == reverse("receipts:requeue", args=[row.receipt_id])
        assert row.session_url == reverse("sessions:detail", args=[row.session_key])


def test_the_list_page_opens_every_odd_row_it_links(operator_client):
    for i, rid in enumerate(ODD):
        make_receipt(receipt_id=rid, turn_id=f"t{i}", status="checkpoint_failed")
    body = operator_client.get("/receipts/").content.decode()
    hrefs = set(re.findall(r'<a href="(/receipts/[^"]+/)">Open</a>', body))
    assert len(hrefs) == len(ODD)
    for href in hrefs:
        assert operator_client.get(html.unescape(href)).status_code == 200


def test_reasons_are_cut_like_truncatechars_and_keep_their_full_text_as_title(viewer_client):
    make_receipt(status="checkpoint_failed", reason="x" * 79)
    make_receipt(status="checkpoint_failed", reason="y" * 200)
    body = viewer_client.get("/receipts/").content.decode()
    assert f">{'x' * 79}</td>" in body
    assert f">{'y' * 79}…</td>" in body and f'title="{"y" * 200}"' in body


def test_rows_name_their_gateway_only_when_the_list_spans_gateways(viewer_client):
    make_session("agent:main:webchat:default")
    make_receipt(status="checkpoint_failed")
    assert "gateway-label" not in viewer_client.get("/receipts/").content.decode()
    assert "gateway-label" not in viewer_client.get("/sessions/").content.decode()
    ensure_gateway("edge-b")
    with using_gateway("edge-b"):
        make_session("agent:main:webchat:default")
        make_receipt(status="checkpoint_failed")
    body = viewer_client.get("/receipts/").content.decode()
    assert re.findall(r'class="gateway-label[^"]*"[^>]*>@([\w-]+)<', body) == ["edge-b", "local"]
    # one gateway chosen: its rows, no label needed on local's
    assert "gateway-label" not in viewer_client.get("/receipts/?gateway=local").content.decode()
    sessions = viewer_client.get("/sessions/").content.decode()
    assert re.findall(r'class="gateway-label[^"]*"[^>]*>@([\w-]+)<', sessions) == [
        "edge-b",
        "local",
    ]


def test_keys_break_only_after_their_separators():
    html = str(wrapped_key("agent:research-assistant:<b>:" + "z" * 45))
    assert html == (
        '<span class="skey"><span>agent:</span><wbr><span>research-assistant:</span><wbr>'
        "<span>&lt;b&gt;:</span><wbr>" + "z" * 45 + "</span>"
    )
    assert str(wrapped_key("")) == ""
    long = str(wrapped_key("agent:main:" + "s:" * 100))
    assert long.endswith("<span>s:</span><wbr><span>…</span></span>") and len(long) < 1200


def test_the_list_page_costs_no_more_queries_for_its_row_values(viewer_client):
    ensure_gateway("edge-b")
    for gateway in ("local", "edge-b"):
        with using_gateway(gateway):
            for i in range(30):
                make_receipt(status="checkpoint_failed", session_key=f"agent:main:s{i}")
    with CaptureQueriesContext(connection) as ctx:
        assert viewer_client.get("/receipts/").status_code == 200
    assert len(ctx.captured_queries) <= 8
