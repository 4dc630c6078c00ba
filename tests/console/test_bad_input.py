"""Malformed filters, unknown statuses, forged ids and cursors: a message, never a 500."""

from __future__ import annotations

import pytest
from django.urls import reverse

from sessions_app.gateways import ensure_gateway, using_gateway
from tests.factories import make_receipt

from .conftest import hx

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "query,fragment",
    [
        ("?attempts_min=lots", "attempts_min must be a whole number"),
        ("?created_from=yesterday-ish", "created_from must be epoch milliseconds or an ISO 8601"),
        ("?due=perhaps", "due must be true or false"),
        ("?reason=" + "x" * 600, "reason is longer than 500"),
        ("?agent=%00", "agent"),
    ],
)
def test_malformed_filters_show_a_message(viewer_client, query, fragment):
    response = viewer_client.get(reverse("receipts:list") + query)
    assert response.status_code == 400
    body = response.content.decode()
    assert "Those filters need fixing" in body and fragment in body
    fragment_response = viewer_client.get(reverse("receipts:list") + query, **hx("receipt-table"))
    assert fragment_response.status_code == 400
    assert fragment in fragment_response.content.decode()


def test_unknown_status_is_a_friendly_empty_result(viewer_client):
    make_receipt(status="checkpoint_failed")
    response = viewer_client.get(reverse("receipts:list") + "?status=no_such_status")
    assert response.status_code == 200
    body = response.content.decode()
    assert "Unknown status no_such_status" in body and "No receipts match" in body


@pytest.mark.parametrize("cursor", ["garbage!!", "Zm9vOmJhcg", "%00%01"])
def test_forged_cursor_is_a_message(viewer_client, cursor):
    for url in (reverse("receipts:list"), reverse("receipts:audit"), reverse("sessions:list")):
        response = viewer_client.get(url + f"?cursor={cursor}")
        assert response.status_code == 400, url
        assert "cursor is not valid" in response.content.decode(), url


def test_forged_new_count_marker_is_a_message(viewer_client):
    response = viewer_client.get(reverse("receipts:new_count") + "?since=@@@", **hx("new-banner"))
    assert response.status_code == 400
    assert "cursor is not valid" in response.content.decode()
    assert response["HX-Retarget"] == "#messages"


def test_forged_receipt_ids_are_404_pages(viewer_client, operator_client):
    for rid in ("does-not-exist", "<script>alert(1)</script>", "x" * 300, "a/b/c"):
        response = viewer_client.get(reverse("receipts:detail", args=[rid]))
        assert response.status_code == 404
        assert "No receipt has that id" in response.content.decode()
        assert "<script>alert" not in response.content.decode()
        assert operator_client.post(reverse("receipts:requeue", args=[rid])).status_code == 404
        assert (
            operator_client.post(
                reverse("receipts:acknowledge", args=[rid]), {"reason": "x"}
            ).status_code
            == 404
        )


def test_forged_plan_and_session_ids_are_404(viewer_client, operator_client):
    assert viewer_client.get(reverse("receipts:plan_detail", args=["nope"])).status_code == 404
    assert viewer_client.get(reverse("receipts:plan_progress", args=["nope"])).status_code == 404
    assert operator_client.post(reverse("receipts:plan_execute", args=["nope"])).status_code == 404
    assert viewer_client.get(reverse("sessions:detail", args=["agent:nope:x"])).status_code == 404
    assert viewer_client.get(reverse("receipts:session_memory") + "?key=").status_code == 404
    assert (
        operator_client.post(
            reverse("receipts:session_checkpoint"), {"key": "agent:nope:x"}
        ).status_code
        == 404
    )


def test_bad_plan_marker_and_audit_surface(viewer_client):
    assert viewer_client.get(reverse("receipts:plans") + "?before=abc:def").status_code == 400
    response = viewer_client.get(reverse("receipts:audit") + "?surface=moon")
    assert response.status_code == 400 and "surface must be one of" in response.content.decode()


def test_bad_expected_stamp_and_bad_plan_filter(operator_client):
    row = make_receipt(scope="repair", status="repair_abandoned")
    response = operator_client.post(
        reverse("receipts:requeue", args=[row.receipt_id]), {"expected_updated_at": "soon"}
    )
    assert response.status_code == 400
    response = operator_client.post(
        reverse("receipts:plan_create"), {"attempts_min": "many", "all_matching": "1"}
    )
    assert response.status_code == 400 and "attempts_min" in response.content.decode()


def test_preview_never_reads_outside_the_workspaces(viewer_client, workspace, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET")
    for path in (str(secret), "../secret.txt", "memory/../../secret.txt"):
        row = make_receipt(status="checkpoint_saved", source_path=path)
        body = viewer_client.get(reverse("receipts:detail", args=[row.receipt_id])).content.decode()
        assert "TOP SECRET" not in body, path
        assert "not in a configured workspace" in body, path


def test_preview_refuses_symlinks_that_escape(viewer_client, workspace, tmp_path):
    secret = tmp_path / "outside.jsonl"
    secret.write_text("OUTSIDE")
    (workspace / "link.jsonl").symlink_to(secret)
    row = make_receipt(status="checkpoint_saved", source_path="link.jsonl")
    body = viewer_client.get(reverse("receipts:detail", args=[row.receipt_id])).content.decode()
    assert "OUTSIDE" not in body


def test_preview_is_capped(viewer_client, workspace):
    (workspace / "big.jsonl").write_text("a" * (70 * 1024) + "TAIL")
    row = make_receipt(status="checkpoint_saved", source_path="big.jsonl")
    body = viewer_client.get(reverse("receipts:detail", args=[row.receipt_id])).content.decode()
    assert "first 64 KiB" in body and "TAIL" not in body


def test_html_in_reason_and_transcript_is_escaped(viewer_client):
    from sessions_app.services import append_message
    from tests.factories import make_session

    row = make_receipt(status="checkpoint_failed", reason="<img src=x onerror=alert(1)>")
    body = viewer_client.get(reverse("receipts:detail", args=[row.receipt_id])).content.decode()
    assert "<img src=x" not in body and "&lt;img src=x onerror=alert(1)&gt;" in body
    session = make_session("agent:main:webchat:xss")
    append_message(session.session_key, role="user", content="<script>window.pwned=1</script>")
    body = viewer_client.get(
        reverse("sessions:detail", args=[session.session_key])
    ).content.decode()
    assert (
        "<script>window.pwned" not in body and "&lt;script&gt;window.pwned=1&lt;/script&gt;" in body
    )


# --- NUL bytes in posted form fields (PostgreSQL cannot store them: a DataError, a 500) ------


def _nul_posts(failed, session):
    """Every console form an operator posts, with a NUL in one of its fields."""
    rid = failed.receipt_id
    key = session.session_key
    return [
        (reverse("receipts:requeue", args=[rid]), {"reason": "a\x00b"}),
        (reverse("receipts:acknowledge", args=[rid]), {"reason": "a\x00b"}),
        (reverse("receipts:plan_create"), {"selected": ["x\x00"], "note": "n"}),
        (reverse("receipts:plan_create"), {"selected": [rid], "note": "n\x00"}),
        (reverse("receipts:plan_create"), {"all_matching": "1", "status": "checkpoint_failed\x00"}),
        (
            reverse("receipts:plan_from_group"),
            {"scope": "checkpoint", "status": "checkpoint_failed", "fingerprint": "f\x00"},
        ),
        (reverse("receipts:session_checkpoint"), {"key": key + "\x00"}),
        (reverse("receipts:session_flush"), {"key": key, "reason\x00": "x"}),
    ]


def test_a_nul_in_any_posted_field_is_a_message_and_changes_nothing(operator_client):
    from receipts_app.models import ReceiptEvent, RequeuePlan
    from tests.factories import make_session

    session = make_session("agent:main:webchat:nul-form", messages=1)
    failed = make_receipt(status="checkpoint_failed", session_key=session.session_key)
    for url, data in _nul_posts(failed, session):
        for headers in ({}, {"HTTP_HX_REQUEST": "true"}):
            response = operator_client.post(url, data, **headers)
            assert response.status_code == 400, (url, data, response.status_code)
            body = response.content.decode()
            assert "a NUL character cannot be stored" in body, (url, body)
            if headers:
                assert response["HX-Retarget"] == "#messages"
    assert not RequeuePlan.objects.exists()
    assert not ReceiptEvent.objects.exclude(action="status_change").exists()
    assert failed.__class__.objects.get(pk=failed.pk).status == "checkpoint_failed"


def test_preview_of_another_gateways_file_never_shows_this_hosts_file(viewer_client, workspace):
    # Session keys overlap between gateways, so gateway b's checkpoint has a relative path this
    # host's workspace may hold too (local's checkpoint of the same key): b's page must not show it.
    relative = "memory/.checkpoints/agent_main_webchat_default/cmp_1.jsonl"
    here = workspace / relative
    here.parent.mkdir(parents=True, exist_ok=True)
    here.write_text('{"local": "this host\'s own checkpoint"}\n')
    ensure_gateway("b")
    with using_gateway("b"):
        row = make_receipt(status="checkpoint_saved", source_path=relative)
    body = viewer_client.get(
        reverse("receipts:detail", args=[row.receipt_id]) + "?gateway=b"
    ).content.decode()
    assert "this host&#x27;s own checkpoint" not in body and "own checkpoint" not in body
    assert "on gateway b&#x27;s host" in body
    local = make_receipt(status="checkpoint_saved", source_path=relative)
    body = viewer_client.get(reverse("receipts:detail", args=[local.receipt_id])).content.decode()
    assert "own checkpoint" in body
