"""Who may call what: Bearer tokens per scope, revoked tokens, and the console's session."""

from __future__ import annotations

import pytest
from django.test import Client

from opensquilla_site.models import ApiToken
from opensquilla_site.tokens import authenticate_token, create_api_token, revoke_api_token
from receipts_app.models import ReceiptEvent
from tests.api.conftest import API, ApiCaller, assert_error
from tests.factories import make_receipt, make_session, make_user

pytestmark = pytest.mark.django_db


def test_no_credentials_is_401(anonymous):
    assert_error(anonymous.get("/receipts"), 401, "unauthorized")
    assert_error(anonymous.post("/sessions", {"session_key": "agent:main:x"}), 401, "unauthorized")


@pytest.mark.parametrize("bad", ["nonsense", "osq_abc_def", "osq__", "Bearer"])
def test_malformed_or_unknown_token_is_401(anonymous, bad):
    body = assert_error(
        anonymous.get("/receipts", headers={"Authorization": f"Bearer {bad}"}), 401, "unauthorized"
    )
    assert "token" in body["detail"]


def test_revoked_token_is_401_and_was_working_before(db):
    user = make_user("ops", "operator")
    token, plaintext = create_api_token(user=user, name="ci", scope="operate")
    caller = ApiCaller(Client(), plaintext)
    assert caller.get("/receipts").status_code == 200
    revoke_api_token(token_id=token.pk)
    assert_error(caller.get("/receipts"), 401, "unauthorized")


def test_token_of_a_deactivated_user_is_401(db):
    user = make_user("gone", "operator")
    _token, plaintext = create_api_token(user=user, name="ci", scope="read")
    user.is_active = False
    user.save()
    assert_error(ApiCaller(Client(), plaintext).get("/receipts"), 401, "unauthorized")


def test_tokens_are_stored_hashed_and_shown_once(db):
    user = make_user("ops", "operator")
    token, plaintext = create_api_token(user=user, name="ci", scope="read")
    assert plaintext.startswith(f"osq_{token.prefix}_")
    stored = ApiToken.objects.get(pk=token.pk)
    secret = plaintext.split("_", 2)[2]
    assert secret not in stored.digest and plaintext not in str(stored.__dict__)
    assert len(stored.digest) == 64
    assert authenticate_token(plaintext) == token
    assert authenticate_token(plaintext + "x") is None
    # The prefix is checked too: a right secret under another prefix is refused.
    assert authenticate_token(f"osq_ffffffff_{secret}") is None
    assert ApiToken.objects.get(pk=token.pk).last_used_at is not None


def test_create_token_rejects_bad_scope_and_name(db):
    user = make_user("ops", "operator")
    with pytest.raises(ValueError, match="scope"):
        create_api_token(user=user, name="x", scope="root")
    with pytest.raises(ValueError, match="name"):
        create_api_token(user=user, name="  ", scope="read")


def test_read_scope_reads_but_cannot_act(reader):
    make_session("agent:main:webchat:r1", messages=1)
    assert reader.get("/sessions").status_code == 200
    assert reader.get("/receipts").status_code == 200
    assert reader.get("/health").status_code == 200
    body = assert_error(reader.post("/sessions", {"session_key": "agent:main:x"}), 403, "forbidden")
    assert body["required_scope"] == "operate"
    assert_error(reader.post("/sessions/agent:main:webchat:r1/reset"), 403, "forbidden")
    assert_error(reader.delete("/sessions/agent:main:webchat:r1"), 403, "forbidden")


def test_operate_scope_acts_but_cannot_delete_or_manage_tokens(operator):
    make_session("agent:main:webchat:o1", messages=1)
    assert operator.post("/sessions/agent:main:webchat:o1/reset").status_code == 200
    assert_error(operator.delete("/sessions/agent:main:webchat:o1"), 403, "forbidden")
    assert_error(operator.get("/tokens"), 403, "forbidden")
    assert_error(operator.post("/tokens", {"name": "x"}), 403, "forbidden")


def test_admin_scope_deletes_sessions(admin):
    session = make_session("agent:main:webchat:a1", messages=1)
    receipt = make_receipt(session_key=session.session_key, session_id=session.session_id)
    assert admin.delete("/sessions/agent:main:webchat:a1").status_code == 204
    # The audit trail names who deleted it, as the admin's delete does.
    events = ReceiptEvent.objects.filter(session_key=session.session_key)
    assert {(e.action, e.receipt_id) for e in events} == {
        ("purged", receipt.receipt_id),
        ("session_deleted", ""),
    }
    assert {(e.actor, e.surface) for e in events} == {("admin (token admin-token)", "api")}


def test_admin_manages_tokens_over_the_api(admin):
    created = admin.post("/tokens", {"name": "deploy-bot", "scope": "operate"})
    assert created.status_code == 201
    body = created.json()
    assert body["scope"] == "operate" and body["username"] == "admin"
    new_caller = ApiCaller(Client(), body["token"])
    assert new_caller.get("/receipts").status_code == 200

    listed = admin.get("/tokens").json()["items"]
    assert "deploy-bot" in [t["name"] for t in listed]
    assert all("token" not in t for t in listed), "plaintext is shown only at creation"

    revoked = admin.delete(f"/tokens/{body['id']}")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert_error(new_caller.get("/receipts"), 401, "unauthorized")
    assert_error(admin.delete("/tokens/999999"), 404, "not_found")
    assert_error(admin.post("/tokens", {"name": "x", "scope": "root"}), 422, "validation_error")


# --- the console's own browser calls --------------------------------------------------------


def _logged_in(username: str, role: str | None) -> Client:
    make_user(username, role)
    client = Client(enforce_csrf_checks=True)
    assert client.login(username=username, password="pw-Secret-123")
    return client


def _csrf(client: Client) -> str:
    client.get("/accounts/login/")  # any page that renders the token sets the cookie
    return client.cookies["csrftoken"].value


def test_console_viewer_session_reads_but_cannot_act(db):
    client = _logged_in("vera", "viewer")
    assert client.get(f"{API}/receipts").status_code == 200
    response = client.post(
        f"{API}/sessions",
        data={"session_key": "agent:main:x"},
        content_type="application/json",
        headers={"X-CSRFToken": _csrf(client)},
    )
    assert_error(response, 403, "forbidden")


def test_console_operator_posts_with_csrf_token(db):
    client = _logged_in("otto", "operator")
    response = client.post(
        f"{API}/sessions",
        data={"session_key": "agent:main:webchat:console"},
        content_type="application/json",
        headers={"X-CSRFToken": _csrf(client)},
    )
    assert response.status_code == 201, response.content


def test_console_post_without_csrf_token_is_refused(db):
    client = _logged_in("otto", "operator")
    response = client.post(
        f"{API}/sessions",
        data={"session_key": "agent:main:webchat:console"},
        content_type="application/json",
    )
    assert_error(response, 403, "csrf_failed")
    assert not client.get(f"{API}/sessions").json()["items"]


def test_console_user_without_a_role_is_403(db):
    client = _logged_in("nobody", None)
    assert_error(client.get(f"{API}/receipts"), 403, "forbidden")


def test_console_admin_may_delete(db):
    client = _logged_in("ada", "admin")
    make_session("agent:main:webchat:del", messages=0)
    response = client.delete(
        f"{API}/sessions/agent:main:webchat:del", headers={"X-CSRFToken": _csrf(client)}
    )
    assert response.status_code == 204


def test_dead_bearer_token_does_not_fall_back_to_the_session(db):
    client = _logged_in("ada", "admin")
    response = client.get(f"{API}/receipts", headers={"Authorization": "Bearer osq_x_y"})
    assert_error(response, 401, "unauthorized")
