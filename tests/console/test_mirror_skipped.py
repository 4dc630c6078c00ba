"""The overview's mirror panel counts the source rows the mirror skipped (a control character
in a key or id), per reason, and links to the liveness page, which lists each one."""

from __future__ import annotations

import pytest
from django.urls import reverse

from receipts_app.mirror.follower import Follower
from receipts_app.mirror.models import MirrorSkippedRow
from sessions_app.models import Session
from tests.mirror.opensquilla_source import FakeGateway

pytestmark = pytest.mark.django_db

NEWLINE_KEY = "agent:main:webchat:x\nsecond-line"
HEADER_ID = "a\r\nSet-Cookie: x=y"


@pytest.fixture
def gateway(tmp_path):
    gw = FakeGateway(tmp_path / "sessions.db")
    yield gw
    gw.close()


def _follow(gateway: FakeGateway) -> Follower:
    follower = Follower(
        db_path=gateway.path,
        workspace=None,
        checkpoint_root=None,
        memory_template=None,
        interval=0.1,
        owner="test-follower",
    )
    assert follower.poll() == "synced"
    return follower


def test_skipped_rows_are_counted_on_the_overview_and_listed_on_liveness(gateway, viewer_client):
    gateway.add_session("agent:main:webchat:good")
    gateway.add_receipt("agent:main:webchat:good")
    gateway.add_session(NEWLINE_KEY)  # a session and its receipt, both with a line break
    gateway.add_receipt(NEWLINE_KEY)
    gateway.add_receipt("agent:main:webchat:good", receipt_id=HEADER_ID, turn_id="t2")
    follower = _follow(gateway)
    assert list(Session.objects.values_list("session_key", flat=True)) == [
        "agent:main:webchat:good"
    ]

    overview = viewer_client.get(reverse("receipts:overview")).content.decode()
    panel = overview[overview.index('id="mirror-title"') :].split("</section>")[0]
    assert "3 rows skipped" in panel
    assert "1 session: session_key must not contain control characters" in panel
    assert "1 receipt: session_key must not contain control characters" in panel
    assert "1 receipt: receipt_id must not contain control characters" in panel
    assert f'href="{reverse("operations:liveness")}#mirror-skipped"' in panel

    liveness = viewer_client.get(reverse("operations:liveness")).content.decode()
    listed = liveness[liveness.index('id="mirror-skipped"') :].split("</table>")[0]
    rowid = gateway.conn.execute(
        "SELECT rowid FROM memory_durable_receipts WHERE receipt_id = ?", (HEADER_ID,)
    ).fetchone()[0]
    assert f"receipt at rowid {rowid}" in listed
    # The key is shown with its control characters escaped, never raw.
    assert r"<code>agent:main:webchat:x\nsecond-line</code>" in listed
    assert "second-line</code>" in listed and "x\nsecond-line" not in listed
    assert "Set-Cookie" in listed and "\r\n" not in listed

    # Seen again (the next pass reads the overlap window again): still one record each.
    gateway.add_receipt("agent:main:webchat:good", turn_id="t3")
    assert follower.poll() == "synced"
    assert MirrorSkippedRow.objects.count() == 3


def test_no_skipped_rows_no_line(gateway, viewer_client):
    gateway.add_session("agent:main:webchat:good")
    _follow(gateway)
    overview = viewer_client.get(reverse("receipts:overview")).content.decode()
    assert 'id="mirror-title"' in overview
    panel = overview[overview.index('id="mirror-title"') :].split("</section>")[0]
    assert (
        "row skipped" not in panel
        and "rows skipped" not in panel
        and "#mirror-skipped" not in panel
    )
