"""A token never outranks its user: it acts with the lower of its scope and the user's role,
checked on every request, and no surface creates a token above the role."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.test import Client

from opensquilla_site.models import ApiToken
from opensquilla_site.tokens import create_api_token
from tests.api.conftest import ApiCaller, assert_error
from tests.factories import make_receipt, make_user

pytestmark = pytest.mark.django_db

RECEIPT = {
    "session_key": "agent:main:webchat:tokens",
    "session_id": "s",
    "scope": "checkpoint",
    "idempotency_key": "tokens:1",
    "status": "checkpoint_saved",
}


def _forged(user, scope: str) -> ApiCaller:
    """A token above its user's role, as one made before this rule existed (or by SQL)."""
    saved = user.groups.first()
    user.groups.set([Group.objects.get(name="admin")])
    _token, plaintext = create_api_token(user=user, name="forged", scope=scope)
    user.groups.set([saved] if saved else [])
    return ApiCaller(Client(), plaintext)


def test_the_cli_refuses_a_token_scope_above_the_users_role():
    make_user("viewer", "viewer")
    with pytest.raises(CommandError, match="viewer.*read.*admin"):
        call_command(
            "create_api_token",
            "--user",
            "viewer",
            "--name",
            "x",
            "--scope",
            "admin",
            stdout=StringIO(),
            stderr=StringIO(),
        )
    assert not ApiToken.objects.exists()


def test_the_cli_still_creates_a_token_at_or_below_the_role():
    make_user("ops", "operator")
    out = StringIO()
    call_command(
        "create_api_token",
        "--user",
        "ops",
        "--name",
        "ci",
        "--scope",
        "read",
        stdout=out,
        stderr=StringIO(),
    )
    assert out.getvalue().startswith("osq_")


def test_an_admin_token_of_a_viewer_cannot_create_tokens_or_write():
    caller = _forged(make_user("viewer", "viewer"), "admin")
    assert_error(caller.post("/tokens", {"name": "more", "scope": "admin"}), 403, "forbidden")
    assert_error(caller.put("/receipts", RECEIPT), 403, "forbidden")
    assert caller.get("/receipts").status_code == 200  # it reads, as its user may
    assert ApiToken.objects.count() == 1


def test_a_user_stripped_of_every_role_loses_the_api_at_the_next_request():
    user = make_user("ops", "operator")
    _token, plaintext = create_api_token(user=user, name="ci", scope="operate")
    caller = ApiCaller(Client(), plaintext)
    assert caller.put("/receipts", RECEIPT).status_code == 200
    user.groups.clear()
    body = assert_error(caller.get("/receipts"), 403, "forbidden")
    assert "role" in body["detail"]
    assert_error(caller.put("/receipts", RECEIPT), 403, "forbidden")


@pytest.mark.parametrize("path", ["/metrics", "/api/v1/openapi.json", "/api/v1/receipts"])
def test_a_token_whose_user_lost_every_role_opens_no_url(path, settings):
    settings.OPENSQUILLA_PUBLIC_API_DOCS = False
    user = make_user("ops", "operator")
    _token, plaintext = create_api_token(user=user, name="ci", scope="read")
    headers = {"Authorization": f"Bearer {plaintext}"}
    assert Client().get(path, headers=headers).status_code == 200
    user.groups.clear()
    response = Client().get(path, headers=headers)
    assert response.status_code in (401, 403), (path, response.status_code)
    assert response["Content-Type"].startswith("application/json")


def test_a_demoted_operator_token_acts_as_read():
    user = make_user("ops", "operator")
    _token, plaintext = create_api_token(user=user, name="ci", scope="operate")
    caller = ApiCaller(Client(), plaintext)
    user.groups.set([Group.objects.get(name="viewer")])
    row = make_receipt(scope="repair", status="repair_failed")
    body = assert_error(caller.post(f"/receipts/{row.receipt_id}/requeue"), 403, "forbidden")
    assert body["required_scope"] == "operate"
    assert caller.get(f"/receipts/{row.receipt_id}").status_code == 200


def test_the_api_creates_tokens_only_up_to_the_callers_role():
    user = make_user("boss", "admin")
    _token, plaintext = create_api_token(user=user, name="root", scope="admin")
    caller = ApiCaller(Client(), plaintext)
    assert caller.post("/tokens", {"name": "ops", "scope": "operate"}).status_code == 201
    # Demoted to operator: the admin token now acts as operate and cannot reach /tokens.
    user.groups.set([Group.objects.get(name="operator")])
    user.is_staff = False
    user.save()
    assert_error(caller.post("/tokens", {"name": "x", "scope": "read"}), 403, "forbidden")
    assert ApiToken.objects.count() == 2


def _grant_directly(user, permission: str) -> None:
    from django.contrib.auth.models import Permission

    app_label, codename = permission.split(".", 1)
    user.user_permissions.add(
        Permission.objects.get(codename=codename, content_type__app_label=app_label)
    )


@pytest.mark.parametrize(
    ("role", "direct", "superuser"),
    [
        (None, (), False),
        ("viewer", (), False),
        ("operator", (), False),
        ("admin", (), False),
        (None, ("receipts_app.view_memorydurablereceipt",), False),
        (
            None,
            ("receipts_app.view_memorydurablereceipt", "receipts_app.operate_receipts"),
            False,
        ),
        ("viewer", ("receipts_app.operate_receipts",), False),
        (None, (), True),
    ],
)
def test_a_tokens_role_check_agrees_with_the_users_role(role, direct, superuser):
    """The token lookup reads the role grants in its own SQL (opensquilla_site.tokens); it must
    give the scope ``roles.scope_for_user`` gives, for permissions held through a group and
    held directly."""
    from opensquilla_site.auth import scope_for_user
    from opensquilla_site.roles import scope_of_annotated
    from opensquilla_site.tokens import _digest, authenticate_token

    user = make_user("u", role)
    for permission in direct:
        _grant_directly(user, permission)
    if superuser:
        user.is_superuser = True
        user.save(update_fields=["is_superuser"])
    # Stored directly: create_api_token refuses a role-less user, and this test is about the
    # lookup, which must judge such a token too.
    ApiToken.objects.create(
        name="t", user=user, scope="read", prefix="abcd1234", digest=_digest("s3cret")
    )
    plaintext = "osq_abcd1234_s3cret"
    found = authenticate_token(plaintext)
    assert found is not None
    fresh = type(user).objects.get(pk=user.pk)  # no permission cache from the grants above
    assert scope_of_annotated(found) == scope_for_user(fresh)
