"""Every URL of the project against every role: nothing is reachable that should not be.

``EXPECTED`` below is the one table a reader needs: for each URL (by name, or by route when
Django gave it none) and HTTP method, the least role that may use it. The test walks
``get_resolver().url_patterns`` (console, sessions, auth, the Django admin and each django-ninja
operation with its methods), so a URL added without an entry here fails
``test_every_url_has_exactly_one_table_entry``.

Principals: anonymous, a logged-in user with no role, viewer, operator, admin (the ``admin``
group, staff), a superuser, and Bearer tokens of scope read / operate / admin plus a revoked
one and one whose user has lost every role. Console sessions reach the API with their role's scope; tokens reach only the API.

What each outcome means:
- allowed → any status below 400 (unless the entry names the status it answers with);
- not logged in → console: 302 to ``/accounts/login/``; admin: 302 to ``/admin/login/``;
  API: 401 JSON;
- logged in but not enough → console: 403 with the "not allowed" page; admin: non-staff are
  sent to the admin login (Django's refusal), staff without the permission get 403; API:
  403 JSON.
No request may answer 500. Each request runs in a savepoint that is rolled back, so one
principal's POST never changes what the next one sees.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from ninja.operation import PathView

from opensquilla_site import login_limit
from opensquilla_site.models import ApiToken, IdempotentRequest
from opensquilla_site.tokens import create_api_token, revoke_api_token
from operations_app.models import (
    AlertDelivery,
    AlertIncident,
    AlertRule,
    Heartbeat,
    OpsCounter,
    TaskStat,
)
from receipts_app.audit import Actor
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent, RequeuePlan
from receipts_app.requeue import create_requeue_plan
from sessions_app.models import Gateway, Session, TranscriptEntry
from tests.factories import make_receipt, make_session, make_user

pytestmark = pytest.mark.django_db

# --- levels ---------------------------------------------------------------------------------

PUBLIC = 0  # no login needed
LOGIN = 1  # any logged-in user, even one without a role
VIEWER = 2  # read scope
OPERATOR = 3  # operate scope
ADMIN = 4  # the admin group (staff) / admin scope
SUPERUSER = 5  # Django superusers only (the auth models' admin)
NOBODY = 6  # refused to everyone (append-only audit rows, for example)

LEVEL_NAMES = {
    PUBLIC: "public",
    LOGIN: "login",
    VIEWER: "viewer",
    OPERATOR: "operator",
    ADMIN: "admin",
    SUPERUSER: "superuser",
    NOBODY: "nobody",
}


@dataclass(frozen=True)
class Rule:
    level: int
    area: str  # "console", "admin", "api" or "public"
    # For an allowed caller: the one status it answers with, when that is not a plain 2xx/3xx
    # (the admin's "view on site" for models without a public URL is a 404, by design).
    ok_status: int | None = None
    body: Any = None  # JSON (API) or form data (console) for unsafe methods
    query: str = ""  # a query string the page needs ("@session" is filled in)


def console(level: int, **kw: Any) -> Rule:
    return Rule(level, "console", **kw)


def api(level: int, **kw: Any) -> Rule:
    return Rule(level, "api", **kw)


def admin(level: int, **kw: Any) -> Rule:
    return Rule(level, "admin", **kw)


def public(**kw: Any) -> Rule:
    return Rule(PUBLIC, "public", **kw)


RECEIPT_BODY = {
    "session_key": "agent:main:webchat:matrix",
    "session_id": "matrix-session",
    "scope": "checkpoint",
    "idempotency_key": "matrix:put",
    "status": "checkpoint_saved",
}


def _admin_model(
    prefix: str, *, view: int = ADMIN, add: int = ADMIN, delete: int = ADMIN
) -> dict[tuple[str, str], Rule]:
    """The five admin views of one model. The change form of a read-only model still opens
    (read-only) with the view permission, so list, change and history share ``view``."""
    return {
        (f"admin:{prefix}_changelist", "GET"): admin(view),
        (f"admin:{prefix}_add", "GET"): admin(add),
        (f"admin:{prefix}_change", "GET"): admin(view),
        (f"admin:{prefix}_history", "GET"): admin(view),
        (f"admin:{prefix}_delete", "GET"): admin(delete),
    }


# --- THE TABLE ------------------------------------------------------------------------------
# (url name, or the route of an unnamed pattern; method) -> the least role that may use it.

EXPECTED: dict[tuple[str, str], Rule] = {
    # Console (receipts_app.console.urls)
    ("receipts:overview", "GET"): console(VIEWER),
    ("receipts:fleet", "GET"): console(VIEWER),
    ("receipts:gateway_repairs", "GET"): console(VIEWER),
    ("receipts:gateway_repairs", "POST"): console(ADMIN, body={"repairs": "console"}),
    ("receipts:scrub", "POST"): console(OPERATOR, body={"gateway": "local"}),
    ("receipts:checkpoints_verified", "GET"): console(VIEWER),
    ("receipts:list", "GET"): console(VIEWER),
    ("receipts:new_count", "GET"): console(VIEWER),
    ("receipts:detail", "GET"): console(VIEWER),
    # The matrix's receipt is a checkpoint_failed row: it names no file to read back (422).
    ("receipts:checkpoint", "GET"): console(VIEWER, ok_status=422),
    ("receipts:checkpoint_jsonl", "GET"): console(VIEWER, ok_status=422),
    ("receipts:checkpoint_markdown", "GET"): console(VIEWER, ok_status=422),
    ("receipts:requeue", "POST"): console(OPERATOR, body={"reason": "matrix"}),
    ("receipts:acknowledge", "POST"): console(OPERATOR, body={"reason": "matrix"}),
    ("receipts:plans", "GET"): console(VIEWER),
    ("receipts:plan_create", "POST"): console(OPERATOR, body={"selected": "@failed"}),
    # A group that is gone answers 409 with a message (an allowed caller got that far).
    ("receipts:plan_from_group", "POST"): console(
        OPERATOR, ok_status=409, body={"scope": "repair", "status": "repair_failed"}
    ),
    ("receipts:plan_detail", "GET"): console(VIEWER),
    ("receipts:plan_progress", "GET"): console(VIEWER),
    ("receipts:plan_execute", "POST"): console(OPERATOR, body={}),
    ("receipts:audit", "GET"): console(VIEWER),
    ("receipts:session_memory", "GET"): console(VIEWER, query="?key=@session"),
    ("receipts:session_checkpoint", "POST"): console(OPERATOR, body={"key": "@session"}),
    ("receipts:session_flush", "POST"): console(OPERATOR, body={"key": "@session"}),
    ("agents:detail", "GET"): console(VIEWER),
    # Asks a linked gateway to repair: admins only; without ?gateway= an admin gets a message.
    ("agents:gateway_repairs", "POST"): console(ADMIN, ok_status=400, body={}),
    ("sessions:list", "GET"): console(VIEWER),
    ("sessions:detail", "GET"): console(VIEWER),
    # Orchestrator probes (operations_app): no credentials, no data
    ("healthz", "GET"): public(),
    ("readyz", "GET"): public(),
    # Prometheus text: a read token or a console role (401/403 JSON otherwise)
    ("metrics", "GET"): api(VIEWER),
    # Operations pages (operations_app.console_urls)
    ("operations:liveness", "GET"): console(VIEWER),
    ("operations:time_at_risk", "GET"): console(VIEWER),
    ("operations:gateway_link", "GET"): console(VIEWER),
    ("operations:alerts", "GET"): console(ADMIN),
    ("operations:alert_create", "GET"): console(ADMIN),
    ("operations:alert_edit", "GET"): console(ADMIN),
    ("operations:alert_test", "POST"): console(ADMIN, body={}),
    ("operations:alert_deliveries", "GET"): console(ADMIN),
    # Accounts (rate-limited login; Django's auth views)
    ("login", "GET"): public(),
    ("login", "POST"): public(body={"username": "nobody-here", "password": "wrong"}),
    ("logout", "POST"): public(body={}),
    # No password reset or change pages: no mail is configured (tests/security/test_headers.py).
    # JSON API (/api/v1/); its schema and docs page are public outside production (no data in
    # them) and need a login or token in production (tests/security/test_headers.py).
    ("api:openapi-json", "GET"): public(),
    ("api:openapi-view", "GET"): public(),
    ("api:api-root", "GET"): public(ok_status=404),
    ("api:list_sessions", "GET"): api(VIEWER),
    ("api:create_session", "POST"): api(
        OPERATOR, body={"session_key": "agent:main:webchat:matrix-new"}
    ),
    ("api:get_session", "GET"): api(VIEWER),
    ("api:delete_session", "DELETE"): api(ADMIN),
    ("api:reset_session", "POST"): api(OPERATOR),
    ("api:append_message", "POST"): api(OPERATOR, body={"role": "user", "content": "hi"}),
    ("api:list_transcript", "GET"): api(VIEWER),
    ("api:create_checkpoint", "POST"): api(OPERATOR, body={}),
    ("api:flush_session", "POST"): api(OPERATOR),
    ("api:get_session_coverage", "GET"): api(VIEWER),
    ("api:list_receipts", "GET"): api(VIEWER),
    ("api:upsert_receipt", "PUT"): api(OPERATOR, body=RECEIPT_BODY),
    ("api:bulk_upsert_receipts", "POST"): api(OPERATOR, body={"receipts": [RECEIPT_BODY]}),
    ("api:get_receipt_detail", "GET"): api(VIEWER),
    ("api:update_receipt", "PATCH"): api(OPERATOR, body={"reason": "matrix"}),
    ("api:list_receipt_events", "GET"): api(VIEWER),
    ("api:read_checkpoint", "GET"): api(VIEWER, ok_status=422),
    ("api:download_checkpoint_jsonl", "GET"): api(VIEWER, ok_status=422),
    ("api:download_checkpoint_markdown", "GET"): api(VIEWER, ok_status=422),
    ("api:requeue_receipt", "POST"): api(OPERATOR, body={"reason": "matrix"}),
    ("api:acknowledge_receipt", "POST"): api(OPERATOR, body={"reason": "matrix"}),
    ("api:create_requeue_plan", "POST"): api(OPERATOR, body={"receipt_ids": ["@failed"]}),
    ("api:get_requeue_plan", "GET"): api(VIEWER),
    ("api:execute_requeue_plan", "POST"): api(OPERATOR),
    ("api:list_health", "GET"): api(VIEWER),
    ("api:get_health", "GET"): api(VIEWER),
    ("api:list_gateways", "GET"): api(VIEWER),
    ("api:list_gateway_archives", "GET"): api(VIEWER),
    ("api:scrub_gateway", "POST"): api(OPERATOR, ok_status=202),
    ("api:list_api_tokens", "GET"): api(ADMIN),
    ("api:create_token", "POST"): api(ADMIN, body={"name": "matrix", "scope": "read"}),
    ("api:revoke_token", "DELETE"): api(ADMIN),
    # Django admin: staff only; each model view also needs its model permission.
    ("admin:index", "GET"): admin(ADMIN),
    ("admin:login", "GET"): public(),
    ("admin:logout", "POST"): public(body={}),
    ("admin:password_change", "GET"): admin(ADMIN),
    ("admin:password_change_done", "GET"): admin(ADMIN),
    ("admin:autocomplete", "GET"): admin(ADMIN, ok_status=403),  # no autocomplete fields
    ("admin:jsi18n", "GET"): admin(ADMIN),
    ("admin:view_on_site", "GET"): admin(ADMIN, ok_status=404),  # no model has a public URL
    ("admin:app_list", "GET"): admin(ADMIN),
    # Unnamed admin patterns: the old object URL redirects to /change/ (which then checks),
    # and the catch-all answers 404 to staff and sends everyone else to the admin login.
    ("admin/<app>/<model>/<path:object_id>/", "GET"): public(),
    ("admin/(?P<url>.*)$", "GET"): admin(ADMIN, ok_status=404),
    ("admin:auth_user_password_change", "GET"): admin(SUPERUSER),
    # The admin group holds no auth.* permissions: users and groups are the superuser's.
    **_admin_model("auth_group", view=SUPERUSER, add=SUPERUSER, delete=SUPERUSER),
    **_admin_model("auth_user", view=SUPERUSER, add=SUPERUSER, delete=SUPERUSER),
    # Tokens are created with their plaintext shown once (CLI/API), never in a form.
    **_admin_model("opensquilla_site_apitoken", add=NOBODY),
    **_admin_model("opensquilla_site_idempotentrequest", add=NOBODY),
    # Sessions come from agents, the API and imports; the admin deletes one through the
    # session service (cascade and audit), as the API does, and adds none.
    **_admin_model("sessions_app_session", add=NOBODY),
    # Gateways are made by imports and followers, and their rows protect them from deletion.
    **_admin_model("sessions_app_gateway", add=NOBODY, delete=NOBODY),
    # Transcripts and receipts change only through the services (which leave events): the
    # admin shows them read-only and never adds or deletes them.
    **_admin_model("sessions_app_transcriptentry", add=NOBODY, delete=NOBODY),
    **_admin_model("receipts_app_memorydurablereceipt", add=NOBODY, delete=NOBODY),
    # The audit log is append-only: readable, never added, changed or deleted by hand.
    **_admin_model("receipts_app_receiptevent", add=NOBODY, delete=NOBODY),
    **_admin_model("receipts_app_requeueplan", add=NOBODY, delete=NOBODY),
    # Operations: alert rules are the admins'; the rest is written by the system, read-only.
    **_admin_model("operations_app_alertrule"),
    **_admin_model("operations_app_alertdelivery", add=NOBODY, delete=NOBODY),
    **_admin_model("operations_app_alertincident", add=NOBODY, delete=NOBODY),
    **_admin_model("operations_app_heartbeat", add=NOBODY, delete=NOBODY),
    **_admin_model("operations_app_opscounter", add=NOBODY, delete=NOBODY),
    **_admin_model("operations_app_taskstat", add=NOBODY, delete=NOBODY),
}

# --- enumerating the URLs -------------------------------------------------------------------

_UNNAMED_OBJECT_REDIRECT = re.compile(r"^admin/\w+/\w+/<path:object_id>/$")


@dataclass(frozen=True)
class Endpoint:
    key: str  # the table's first column
    route: str  # the full route, converters and all
    methods: tuple[str, ...]  # only known for ninja operations; () otherwise


def _ninja_methods(pattern: URLPattern) -> tuple[str, ...] | None:
    """The methods of the ninja operation this pattern is named after (None: not ninja)."""
    closure = getattr(pattern.callback, "__closure__", None) or ()
    views = [c.cell_contents for c in closure if isinstance(c.cell_contents, PathView)]
    if not views:
        return None
    for operation in views[0].operations:
        name = getattr(operation, "url_name", None) or operation.view_func.__name__
        if name == pattern.name:
            return tuple(sorted(operation.methods))
    raise AssertionError(f"no ninja operation named {pattern.name} on {pattern.pattern}")


def _walk(patterns: list[Any], prefix: str = "", namespace: str = "") -> list[Endpoint]:
    found: list[Endpoint] = []
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            ns = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
            found += _walk(pattern.url_patterns, prefix + str(pattern.pattern), ns)
            continue
        route = prefix + str(pattern.pattern)
        if pattern.name:
            key = f"{namespace}{pattern.name}"
        elif _UNNAMED_OBJECT_REDIRECT.match(route):
            key = "admin/<app>/<model>/<path:object_id>/"
        else:
            key = route
        found.append(Endpoint(key, route, _ninja_methods(pattern) or ()))
    return found


def all_endpoints() -> list[Endpoint]:
    return _walk(get_resolver().url_patterns)


# --- the world the requests run in ----------------------------------------------------------


@dataclass
class World:
    session: Session
    failed: MemoryDurableReceipt
    plan: RequeuePlan
    spare_token: ApiToken
    objects: dict[str, Any] = field(default_factory=dict)

    def fill_query(self, query: str) -> str:
        return query.replace("@session", self.session.session_key)

    def fill(self, value: Any) -> Any:
        """Replace the ``@failed`` / ``@session`` placeholders of a table body."""
        if isinstance(value, dict):
            return {k: self.fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.fill(v) for v in value]
        if value == "@failed":
            return self.failed.receipt_id
        if value == "@session":
            return self.session.session_key
        return value


@pytest.fixture
def world(db, workspace) -> World:
    session = make_session("agent:main:webchat:matrix", messages=2)
    failed = make_receipt(
        session_key=session.session_key,
        session_id=session.session_id,
        status="checkpoint_failed",
        reason="disk full",
    )
    owner = make_user("token-owner", "admin")
    spare, _ = create_api_token(user=owner, name="spare", scope="read")
    plan = create_requeue_plan(
        filters={}, receipt_ids=[failed.receipt_id], actor=Actor("seed", "console")
    )
    idem = IdempotentRequest.objects.create(
        key="k", token_digest="d", method="POST", path="/x", status_code=200, response_body={}
    )
    rule = AlertRule.objects.create(
        name="matrix", condition="failure_status", threshold=1, channel="email", target="a@b.co"
    )
    world = World(session=session, failed=failed, plan=plan, spare_token=spare)
    world.objects = {
        "auth_group": owner.groups.first(),
        "auth_user": owner,
        "opensquilla_site_apitoken": spare,
        "opensquilla_site_idempotentrequest": idem,
        "sessions_app_session": session,
        "sessions_app_gateway": Gateway.objects.get(name="local"),
        "sessions_app_transcriptentry": TranscriptEntry.objects.filter(
            session_id=session.session_id
        ).first(),
        "receipts_app_memorydurablereceipt": failed,
        "receipts_app_receiptevent": ReceiptEvent.objects.first(),
        "receipts_app_requeueplan": plan,
        "operations_app_alertrule": rule,
        "operations_app_alertdelivery": AlertDelivery.objects.create(rule=rule, kind="test"),
        "operations_app_alertincident": AlertIncident.objects.create(rule=rule, subject="main"),
        "operations_app_heartbeat": Heartbeat.objects.create(kind="worker", name="matrix"),
        "operations_app_opscounter": OpsCounter.objects.create(name="matrix"),
        "operations_app_taskstat": TaskStat.objects.create(task="matrix"),
    }
    return world


def concrete_path(endpoint: Endpoint, world: World) -> str:
    """The endpoint's route with every parameter filled from ``world``."""
    route = endpoint.route
    model = re.match(r"admin/(\w+)/(\w+)/", route)
    obj = world.objects.get(f"{model[1]}_{model[2]}") if model else None
    values = {
        "receipt_id": world.failed.receipt_id,
        "key": world.session.session_key,
        "session_key": world.session.session_key,
        "plan_id": world.plan.plan_id,
        "rule_id": str(world.objects["operations_app_alertrule"].pk),
        "agent_id": "main",
        "name": "local",  # a gateway
        "token_id": str(world.spare_token.pk),
        "object_id": str(obj.pk) if obj is not None else "1",
        "id": str(world.objects["auth_user"].pk),
        "content_type_id": str(ContentType.objects.get_for_model(Session).pk),
        "uidb64": "MQ",
        "token": "not-a-real-token",
        "app_label": "receipts_app",
        "url": "no-such-admin-page/",
    }
    if endpoint.key == "admin:view_on_site":
        values["object_id"] = str(world.session.pk)
    path = re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda m: values[m[1]], route)
    path = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: values[m[1]], path)
    return "/" + path.replace("^", "").replace("$", "")


# --- principals -----------------------------------------------------------------------------


@dataclass
class Principal:
    name: str
    client: Client
    rank: int  # the level this principal reaches, by the table's scale
    logged_in: bool = False  # holds a console session
    staff: bool = False
    token: str | None = None  # a Bearer token (API only; worth nothing on pages)
    token_live: bool = False

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


def _session_principal(name: str, role: str | None, rank: int, *, superuser: bool = False):
    user = make_user(f"matrix-{name}", role)
    if superuser:
        User.objects.filter(pk=user.pk).update(is_superuser=True, is_staff=True)
    client = Client()
    assert client.login(username=f"matrix-{name}", password="pw-Secret-123")
    return Principal(name, client, rank, logged_in=True, staff=role == "admin" or superuser)


def _token_principal(name: str, scope: str, rank: int, *, revoked: bool = False) -> Principal:
    user = make_user(f"matrix-{name}", "admin")  # the token's scope, not the user, decides
    token, plaintext = create_api_token(user=user, name=name, scope=scope)
    if revoked:
        revoke_api_token(token_id=token.pk)
    return Principal(name, Client(), rank, token=plaintext, token_live=not revoked)


def _roleless_token_principal() -> Principal:
    """A live token whose user has since lost every role: it must open nothing a role opens."""
    user = make_user("matrix-token-no-role", "operator")
    _token, plaintext = create_api_token(user=user, name="no-role", scope="operate")
    user.groups.clear()
    return Principal("token-no-role", Client(), PUBLIC, token=plaintext, token_live=True)


PRINCIPALS = [
    "anonymous",
    "no-role",
    "viewer",
    "operator",
    "admin",
    "superuser",
    "token-read",
    "token-operate",
    "token-admin",
    "token-revoked",
    "token-no-role",
]


def build_principal(name: str) -> Principal:
    builders = {
        "anonymous": lambda: Principal("anonymous", Client(), PUBLIC),
        "no-role": lambda: _session_principal("no-role", None, LOGIN),
        "viewer": lambda: _session_principal("viewer", "viewer", VIEWER),
        "operator": lambda: _session_principal("operator", "operator", OPERATOR),
        "admin": lambda: _session_principal("admin", "admin", ADMIN),
        "superuser": lambda: _session_principal("superuser", None, SUPERUSER, superuser=True),
        "token-read": lambda: _token_principal("token-read", "read", VIEWER),
        "token-operate": lambda: _token_principal("token-operate", "operate", OPERATOR),
        "token-admin": lambda: _token_principal("token-admin", "admin", ADMIN),
        "token-revoked": lambda: _token_principal("token-revoked", "admin", ADMIN, revoked=True),
        "token-no-role": _roleless_token_principal,
    }
    return builders[name]()


# --- one request, judged --------------------------------------------------------------------


def send(principal: Principal, method: str, path: str, rule: Rule | None, world: World):
    """One request inside a rolled-back savepoint; the client's cookies are restored after."""
    cookies = {name: morsel.value for name, morsel in principal.client.cookies.items()}
    body = world.fill(rule.body) if rule is not None and rule.body is not None else None
    call = getattr(principal.client, method.lower())
    kwargs: dict[str, Any] = {"headers": principal.headers()}
    if rule is not None and rule.area == "api" and method != "GET":
        kwargs.update(data=body if body is not None else {}, content_type="application/json")
    elif method != "GET" and body is not None:
        kwargs["data"] = body
    with transaction.atomic():
        response = call(path, **kwargs)
        transaction.set_rollback(True)
    principal.client.cookies.clear()
    for name, value in cookies.items():
        principal.client.cookies[name] = value
    return response


def judge(principal: Principal, rule: Rule, response: Any) -> str | None:
    """None when the response is what the table says; else a one-line complaint."""
    status = response.status_code
    location = response.get("Location", "")
    if status >= 500:
        return f"{status} server error"
    if rule.area == "api":
        authenticated = principal.token_live or (principal.logged_in and not principal.token)
    else:
        authenticated = principal.logged_in
    rank = principal.rank if authenticated else PUBLIC
    if rule.area == "console" and principal.token:
        rank = PUBLIC  # tokens open the API only
    if rank >= rule.level and rule.level < NOBODY:
        if rule.ok_status is not None:
            return None if status == rule.ok_status else f"allowed: wanted {rule.ok_status}"
        return None if status < 400 else f"allowed: wanted < 400, got {status}"
    if rule.area == "api":
        if not authenticated:
            return None if status == 401 else f"unauthenticated: wanted 401, got {status}"
        if status != 403 or response.json().get("code") != "forbidden":
            return f"insufficient scope: wanted 403 forbidden, got {status}"
        return None
    if rule.area == "console":
        if not authenticated:
            ok = status == 302 and location.startswith("/accounts/login/")
            return None if ok else f"anonymous: wanted 302 to login, got {status} {location}"
        ok = status == 403 and "not allow" in response.content.decode()
        return None if ok else f"insufficient role: wanted the 403 page, got {status}"
    # The Django admin: anyone not staff is sent to its login; staff lacking the model
    # permission get 403.
    if not authenticated or not principal.staff:
        ok = status == 302 and location.startswith("/admin/login/")
        return None if ok else f"non-staff: wanted 302 to admin login, got {status} {location}"
    return None if status == 403 else f"staff without permission: wanted 403, got {status}"


# --- the tests ------------------------------------------------------------------------------


def test_every_url_has_exactly_one_table_entry():
    """A new URL (or a new API operation/method) without a row in EXPECTED fails here."""
    endpoints = all_endpoints()
    keys = {e.key for e in endpoints}
    table_keys = {key for key, _method in EXPECTED}
    missing = sorted(keys - table_keys)
    stale = sorted(table_keys - keys)
    assert not missing, f"URLs with no entry in EXPECTED: {missing}"
    assert not stale, f"EXPECTED rows for URLs that no longer exist: {stale}"
    for endpoint in endpoints:
        if not endpoint.methods:
            continue
        listed = {m for k, m in EXPECTED if k == endpoint.key}
        assert listed == set(endpoint.methods), (endpoint.key, listed, endpoint.methods)
    assert len(endpoints) > 100  # the walk really reached the admin and the API


@pytest.mark.parametrize("who", PRINCIPALS)
def test_each_principal_reaches_exactly_what_the_table_allows(who, world, monkeypatch):
    # The login POST in the table must not trip the (separately tested) login rate limit.
    monkeypatch.setattr(login_limit, "attempt", lambda *args, **kwargs: False)
    principal = build_principal(who)
    endpoints = {e.key: e for e in all_endpoints()}
    failures: list[str] = []
    tried = 0
    for (key, method), rule in sorted(EXPECTED.items()):
        path = concrete_path(endpoints[key], world) + world.fill_query(rule.query)
        response = send(principal, method, path, rule, world)
        tried += 1
        complaint = judge(principal, rule, response)
        if complaint:
            failures.append(f"{method} {path} [{key}, {LEVEL_NAMES[rule.level]}]: {complaint}")
    assert tried == len(EXPECTED)
    assert not failures, f"{who}: {len(failures)} of {tried} wrong:\n" + "\n".join(failures)


def test_no_url_answers_500_to_an_unexpected_method(world, monkeypatch):
    """The methods a URL does not serve are refused (405, a redirect, a form), never a 500."""
    monkeypatch.setattr(login_limit, "attempt", lambda *args, **kwargs: False)
    endpoints = {e.key: e for e in all_endpoints()}
    served: dict[str, set[str]] = {}
    for key, method in EXPECTED:
        served.setdefault(key, set()).add(method)
    crashes: list[str] = []
    for who in ("anonymous", "superuser", "token-admin"):
        principal = build_principal(who)
        for key, methods in sorted(served.items()):
            if key.startswith("admin"):
                continue  # the admin's POSTs are its own forms, exercised in tests/console
            path = concrete_path(endpoints[key], world)
            for method in {"GET", "POST", "PUT", "PATCH", "DELETE"} - methods:
                response = send(principal, method, path, None, world)
                if response.status_code >= 500:
                    crashes.append(f"{who} {method} {path}: {response.status_code}")
    assert not crashes, "\n".join(crashes)
