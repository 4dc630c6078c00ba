"""Sessions over the API: keys with colons and slashes, cursors, resets, deletes, messages."""

from __future__ import annotations

import pytest

from receipts_app.models import MemoryDurableReceipt
from sessions_app.models import Session, TranscriptEntry
from tests.api.conftest import assert_error
from tests.factories import make_receipt, make_session

pytestmark = pytest.mark.django_db

KEY = "agent:Ops:telegram:group/42:thread"  # colons, a slash, and an agent id to canonicalise
CANONICAL = "agent:ops:telegram:group/42:thread"


def test_create_returns_the_canonical_session_and_409_on_repeat(operator):
    created = operator.post("/sessions", {"session_key": KEY})
    assert created.status_code == 201
    body = created.json()
    assert body["session_key"] == CANONICAL and body["agent_id"] == "ops" and body["epoch"] == 0
    again = assert_error(operator.post("/sessions", {"session_key": KEY}), 409, "conflict")
    assert CANONICAL in again["detail"]
    assert Session.objects.count() == 1


def test_create_rejects_bad_input_with_422(operator):
    assert_error(operator.post("/sessions", {"session_key": "   "}), 422, "validation_error")
    assert_error(operator.post("/sessions", {}), 422, "validation_error")
    assert_error(operator.post("/sessions", {"session_key": "a\x00b"}), 422, "validation_error")
    assert_error(
        operator.post("/sessions", {"session_key": "k", "surprise": 1}), 422, "validation_error"
    )
    assert Session.objects.count() == 0


def test_get_by_raw_or_url_encoded_key(reader):
    make_session(KEY)
    assert reader.get(f"/sessions/{KEY}").json()["session_key"] == CANONICAL
    assert reader.get("/sessions/agent%3Aops%3Atelegram%3Agroup%2F42%3Athread").status_code == 200
    assert_error(reader.get("/sessions/agent:main:nope"), 404, "not_found")


def test_list_pages_with_a_cursor_newest_first(reader):
    keys = [make_session(f"agent:main:webchat:p{i}").session_key for i in range(5)]
    first = reader.get("/sessions", {"limit": 2}).json()
    second = reader.get("/sessions", {"limit": 2, "cursor": first["next_cursor"]}).json()
    third = reader.get("/sessions", {"limit": 2, "cursor": second["next_cursor"]}).json()
    seen = [s["session_key"] for page in (first, second, third) for s in page["items"]]
    assert sorted(seen) == sorted(keys) and len(seen) == 5
    assert third["next_cursor"] is None
    assert_error(reader.get("/sessions", {"cursor": "garbage!"}), 422, "validation_error")
    assert_error(reader.get("/sessions", {"limit": 501}), 422, "validation_error")
    assert reader.get("/sessions", {"search": "p3"}).json()["items"][0]["session_key"] == keys[3]


def test_reset_starts_a_new_generation(operator):
    old = make_session(KEY, messages=2)
    response = operator.post(f"/sessions/{KEY}/reset")
    assert response.status_code == 200
    body = response.json()
    assert body["epoch"] == 1 and body["session_id"] != old.session_id
    assert operator.get(f"/sessions/{KEY}/transcript").json()["items"] == []
    assert_error(operator.post("/sessions/agent:main:nope/reset"), 404, "not_found")


def test_delete_removes_the_session_and_its_receipts(admin):
    session = make_session(KEY, messages=1)
    make_receipt(session_key=CANONICAL, session_id=session.session_id)
    assert admin.delete(f"/sessions/{KEY}").status_code == 204
    assert not Session.objects.exists()
    assert not MemoryDurableReceipt.objects.filter(session_key=CANONICAL).exists()
    assert_error(admin.delete(f"/sessions/{KEY}"), 404, "not_found")


def test_append_message_and_read_the_transcript_in_pages(operator):
    make_session(KEY)
    for i in range(3):
        response = operator.post(f"/sessions/{KEY}/messages", {"role": "user", "content": f"m{i}"})
        assert response.status_code == 201
    structured = operator.post(
        f"/sessions/{KEY}/messages",
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "hello"}],
            "tool_calls": [{"id": "c1", "name": "lookup"}],
            "token_count": 7,
        },
    )
    assert structured.status_code == 201
    assert structured.json()["tool_calls"] == [{"id": "c1", "name": "lookup"}]

    first = operator.get(f"/sessions/{KEY}/transcript", {"limit": 3}).json()
    assert [e["content"] for e in first["items"]] == ["m0", "m1", "m2"]
    rest = operator.get(f"/sessions/{KEY}/transcript", {"cursor": first["next_cursor"]}).json()
    assert len(rest["items"]) == 1 and rest["next_cursor"] is None
    assert '"hello"' in rest["items"][0]["content"]


def test_append_message_errors(operator):
    make_session(KEY)
    assert_error(
        operator.post(f"/sessions/{KEY}/messages", {"role": "robot", "content": "x"}),
        422,
        "validation_error",
    )
    assert_error(
        operator.post(f"/sessions/{KEY}/messages", {"role": "user", "content": {"a": "\x00"}}),
        422,
        "validation_error",
    )
    assert_error(
        operator.post("/sessions/agent:main:nope/messages", {"role": "user", "content": "x"}),
        404,
        "not_found",
    )
    assert_error(operator.get("/sessions/agent:main:nope/transcript"), 404, "not_found")
    assert TranscriptEntry.objects.count() == 0


@pytest.mark.parametrize("size", [3, 30])
def test_list_sessions_query_count_does_not_grow_with_the_page(
    reader, django_assert_num_queries, size
):
    for i in range(size):
        make_session(f"agent:main:webchat:q{i}")
    reader.get("/sessions")  # the token's last_used_at is written once a minute, not per call
    # token lookup, then the page
    with django_assert_num_queries(2):
        response = reader.get("/sessions", {"limit": 500})
    assert len(response.json()["items"]) == size


@pytest.mark.parametrize("size", [3, 30])
def test_transcript_query_count_does_not_grow_with_the_page(
    reader, django_assert_num_queries, size
):
    make_session(KEY, messages=size)
    reader.get("/sessions")
    # token lookup, session lookup, the page
    with django_assert_num_queries(3):
        response = reader.get(f"/sessions/{KEY}/transcript", {"limit": 500})
    assert len(response.json()["items"]) == size
