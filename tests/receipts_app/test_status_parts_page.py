"""A receipts page of several statuses is read one status at a time (``page_receipts``):
the same rows in the same order as the plain ``status IN (…)`` query, on every page.

Runs on the database the suite is pointed at (SQLite by default; PostgreSQL with
``DATABASE_URL=postgres://…``): the union of per-status sub-selects must hold on both.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from opensquilla_site.pagination import keyset_page
from receipts_app.models import MemoryDurableReceipt
from receipts_app.selectors import ReceiptFilter, filter_receipts, page_receipts
from sessions_app.gateways import DEFAULT_GATEWAY, ensure_gateway, using_gateway
from tests.api.conftest import reader  # noqa: F401 - fixture: an API caller with a read token
from tests.console.conftest import viewer_client  # noqa: F401 - fixture: a console viewer
from tests.factories import make_receipt

pytestmark = pytest.mark.django_db

GATEWAYS = (DEFAULT_GATEWAY, "gw-a", "gw-b")
# gw-b never has repair_failed, nobody has hash_mismatch: empty branches of every kind.
STATUSES = (
    "checkpoint_saved",
    "checkpoint_failed",
    "repair_pending",
    "repair_abandoned",
    "repair_failed",
    "hash_mismatch",
)
AGENTS = ("main", "ops")
SCOPES = ("checkpoint", "repair")
NOW = 1_750_000_000_000


def _seed(rng: random.Random, rows: int = 400) -> None:
    for name in GATEWAYS[1:]:
        ensure_gateway(name)
    objs = []
    for n in range(rows):
        gateway = rng.choice(GATEWAYS)
        status = rng.choice(STATUSES[:5])
        if gateway == "gw-b" and status == "repair_failed":
            status = "repair_pending"
        agent = rng.choice(AGENTS)
        key = f"agent:{agent}:webchat:s{rng.randrange(5)}"
        objs.append(
            MemoryDurableReceipt(
                gateway_id=gateway,
                receipt_id=f"r-{n}",
                session_key=key,
                session_id=f"sid-{n % 7}",
                turn_id=f"turn-{n}",
                scope=rng.choice(SCOPES),
                idempotency_key=f"k-{n}",
                status=status,
                reason=rng.choice([None, "OSError: disk full", "timeout talking to model"]),
                attempt_count=rng.randrange(4),
                next_retry_at_ms=rng.choice([None, NOW - 1, NOW + 1]),
                # Few distinct times: many ties, ordered by id within one.
                created_at=NOW - rng.randrange(40),
                updated_at=NOW - rng.randrange(40),
                agent_id=agent,
            )
        )
    MemoryDurableReceipt.objects.bulk_create(objs)


def _plain_pages(f: ReceiptFilter, limit: int) -> list[list[int]]:
    """Every page of the plain query (``status IN (…)``, one keyset page at a time)."""
    pages, cursor = [], None
    while True:
        page = keyset_page(filter_receipts(f), cursor=cursor, limit=limit)
        pages.append([r.id for r in page.rows])
        if not page.next_cursor:
            return pages
        cursor = page.next_cursor


def _pages(f: ReceiptFilter, limit: int, *, for_console: bool) -> list[list[int]]:
    pages, cursor = [], None
    while True:
        with CaptureQueriesContext(connection) as ctx:
            page = page_receipts(f, cursor=cursor, limit=limit, for_console=for_console)
            ids = [r.id for r in page.rows]
        assert len(ctx.captured_queries) == 1  # one statement a page, whatever the statuses
        pages.append(ids)
        if not page.next_cursor:
            return pages
        cursor = page.next_cursor


def _random_filter(rng: random.Random) -> ReceiptFilter:
    f = ReceiptFilter(
        statuses=tuple(rng.sample(STATUSES, rng.randint(2, 4))),
        gateway=rng.choice([None, *GATEWAYS]),
    )
    extras = {
        "agent": rng.choice(AGENTS),
        "scopes": (rng.choice(SCOPES),),
        "session_key_prefix": "agent:main:",
        "reason_contains": "DISK",
        "created_from": NOW - 30,
        "created_to": NOW - 5,
        "attempts_min": 1,
        "attempts_max": 2,
        "due": rng.choice([True, False]),
        "session_id": "sid-3",
    }
    for name in rng.sample(sorted(extras), rng.randint(0, 3)):
        f = replace(f, **{name: extras[name]})
    return f


def test_a_page_of_several_statuses_is_the_plain_querys_page_on_every_page():
    rng = random.Random(19)
    _seed(rng)
    tried = 0
    for _ in range(60):
        f = _random_filter(rng)
        limit = rng.choice([1, 3, 7, 50])
        expected = _plain_pages(f, limit)
        everything = sorted(
            filter_receipts(f).values_list("created_at", "id"), reverse=True
        )  # the order itself, computed apart from any page
        assert [i for page in expected for i in page] == [i for _, i in everything]
        assert _pages(f, limit, for_console=rng.random() < 0.5) == expected, f
        tried += len(expected)
    assert tried > 60  # cursors were followed, not only first pages


def test_a_status_this_gateway_lacks_lists_nothing_until_it_has_one():
    ensure_gateway("gw-a")
    with using_gateway("gw-a"):
        other = make_receipt(status="repair_failed")
    mine = make_receipt(status="repair_abandoned", created_at=NOW)
    given_up = ReceiptFilter(statuses=("repair_failed", "repair_abandoned"), gateway="local")
    assert [r.receipt_id for r in page_receipts(given_up).rows] == [mine.receipt_id]
    # The counts move with the write (same transaction): the next page read sees the row.
    newer = make_receipt(status="repair_failed", created_at=NOW + 1)
    assert [r.receipt_id for r in page_receipts(given_up).rows] == [
        newer.receipt_id,
        mine.receipt_id,
    ]
    assert other.receipt_id not in {r.receipt_id for r in page_receipts(given_up).rows}
    failed_elsewhere = ReceiptFilter(statuses=("repair_failed",), gateway="gw-a")
    assert [r.receipt_id for r in page_receipts(failed_elsewhere).rows] == [other.receipt_id]


def test_a_page_of_several_statuses_reads_each_status_on_its_own():
    make_receipt(status="checkpoint_failed")
    f = ReceiptFilter(statuses=("checkpoint_failed", "repair_failed", "repair_abandoned"))
    with CaptureQueriesContext(connection) as ctx:
        page_receipts(f, limit=50)
    (query,) = ctx.captured_queries
    # One sub-select per status, each ordered and cut at the page size (an index walk).
    assert query["sql"].count("UNION ALL") == 2
    assert query["sql"].count("LIMIT 51") == 4


def test_api_and_console_list_several_statuses_newest_first(reader, viewer_client):  # noqa: F811
    rows = [
        make_receipt(status=status, created_at=NOW + n)
        for n, status in enumerate(["repair_failed", "checkpoint_saved", "repair_abandoned"])
    ]
    wanted = {"status": ["repair_failed", "repair_abandoned"]}
    api = reader.get("/receipts", {**wanted, "limit": 1})
    assert api.status_code == 200
    assert [r["receipt_id"] for r in api.json()["items"]] == [rows[2].receipt_id]
    more = reader.get("/receipts", {**wanted, "limit": 1, "cursor": api.json()["next_cursor"]})
    assert [r["receipt_id"] for r in more.json()["items"]] == [rows[0].receipt_id]
    assert more.json()["next_cursor"] is None

    page = viewer_client.get("/receipts/", wanted)
    assert page.status_code == 200
    body = page.content.decode()
    assert rows[1].receipt_id not in body
    assert body.index(rows[2].receipt_id) < body.index(rows[0].receipt_id)
