"""An attacker's probe of every URL: hostile path parameters, query strings, bodies and methods.

``test_url_role_matrix`` says who may reach each URL with well-formed input. This module sends
the input nobody should send, to every URL the resolver knows (a new URL is probed without a
change here: the list comes from ``get_resolver()``; its table row, which ``test_url_role_matrix``
already demands, gives its methods):

- every path parameter replaced by each of ``HOSTILE`` (over-long, NUL and control characters,
  RTL marks, emoji, broken UTF-8, numbers beyond 64 bits, negatives, non-numeric ids, SQL
  metacharacters, path traversal, unknown gateway names);
- every query parameter the URL reads (its OpenAPI parameters; the console's filters), each
  with each hostile value, plus repeats of the same parameter;
- every unsafe API operation with bad JSON, the wrong content type, a JSON array, and each
  field of its body set to hostile values (lone surrogates escaped in JSON, huge numbers);
- every console POST with each form field hostile, and without its CSRF token.

Each answer is judged by ``complaint``: never a 5xx, never a traceback or the server's paths
or settings; an API error is JSON ``{"detail", "code"}`` with a 4xx a client can act on; a
console error is a page that says what is wrong. Hostile GETs run as a viewer (who must see
no paths) and as the strongest principal of the URL's area (so the validation behind the role
check is reached). ``test_read_only_principals_change_nothing`` sends every unsafe request as
a viewer and as a read-scope token (403, and the database unchanged) and as anonymous (302 to
the login page, or 401 JSON). Every request runs in a rolled-back savepoint.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote

import pytest
from django.conf import settings
from django.db import transaction
from django.test import Client

from opensquilla_site import login_limit
from opensquilla_site.api import api as ninja_api
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent, RequeuePlan
from receipts_app.selectors import ReceiptFilter
from sessions_app.models import Session, TranscriptEntry
from tests.security.test_url_role_matrix import (
    ADMIN,
    EXPECTED,
    NOBODY,
    OPERATOR,
    Endpoint,
    Principal,
    World,
    all_endpoints,
    build_principal,
    concrete_path,
)
from tests.security.test_url_role_matrix import world as matrix_world

# The role matrix's fixture (its receipt, session, plan, token and admin rows), under its name.
world = matrix_world

pytestmark = pytest.mark.django_db

# --- hostile values -------------------------------------------------------------------------

LONG = "x" * 10_000
HOSTILE: dict[str, str] = {
    "long": LONG,
    "nul": "a\x00b",
    "control": "a\x01\x07\x1b[31m\x7fb",
    "newline": "local\r\nX-Injected: 1",
    "rtl": "\u202egnp.exe\u202c",
    "emoji": "\U0001f990\U0001f4a5",
    "empty": "",
    "negative": "-1",
    "huge": "99999999999999999999999999",
    "below-int64": "-9223372036854775809",
    "non-numeric": "abc",
    "traversal": "../../../../etc/passwd",
    "sql": "' OR 1=1 --",
    "like": "%_\\",
    "unknown-gateway": "no-such-gateway",
}
# Broken UTF-8 (a lone surrogate's bytes) only exists percent-encoded in a URL.
BROKEN_UTF8 = "%ED%A0%80"
# Each query parameter gets the values a parser of *that* parameter can trip on (length,
# number range, encoding); the values every parser sees alike (NUL, control characters, SQL
# and traversal text) go to all of a URL's parameters at once, once each.
PER_PARAM_VALUES = ("long", "huge", "below-int64", "negative")
ALL_PARAMS_VALUES = ("nul", "control", "newline", "rtl", "emoji", "traversal", "sql", "like")

# --- the parameters each URL reads ----------------------------------------------------------

RECEIPT_FILTERS = ReceiptFilter.PARAMS + ("cursor", "limit")
CONSOLE_QUERY: dict[str, tuple[str, ...]] = {
    "receipts:overview": ("range",),
    "receipts:list": RECEIPT_FILTERS,
    "receipts:new_count": ReceiptFilter.PARAMS + ("since",),
    "receipts:checkpoint": ("offset", "limit"),
    "receipts:plans": ("before", "limit"),
    "receipts:audit": ("actor", "surface", "action", "receipt_id", "plan_id", "cursor", "limit"),
    "receipts:session_memory": ("key", "v"),
    "receipts:detail": ("v",),
    "sessions:list": ("q", "agent", "cursor"),
    "sessions:detail": ("cursor",),
    "admin:receipts_app_memorydurablereceipt_changelist": ("q", "o", "p", "status", "all"),
    "admin:sessions_app_session_changelist": ("q", "o", "p"),
}
# Read by middleware on every console page.
EVERY_PAGE_QUERY = ("gateway",)


def _api_query_params() -> dict[tuple[str, str], tuple[str, ...]]:
    """(route under /api/v1/ in Django's spelling, method) -> its query parameters."""
    schema = ninja_api.get_openapi_schema()
    found: dict[tuple[str, str], tuple[str, ...]] = {}
    for path, operations in schema["paths"].items():
        route = re.sub(r"\{(\w+)\}", r"<\1>", path.removeprefix("/"))
        for method, operation in operations.items():
            names = tuple(p["name"] for p in operation.get("parameters", []) if p["in"] == "query")
            found[(route, method.upper())] = names
    return found


def _api_body_fields() -> dict[tuple[str, str], dict[str, Any]]:
    """(route, method) -> the JSON schema properties of its body (top level)."""
    schema = ninja_api.get_openapi_schema()
    components = schema.get("components", {}).get("schemas", {})
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for path, operations in schema["paths"].items():
        route = re.sub(r"\{(\w+)\}", r"<\1>", path.removeprefix("/"))
        for method, operation in operations.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if not body:
                continue
            ref = body["schema"].get("$ref", "")
            props = components.get(ref.rsplit("/", 1)[-1], {}).get("properties", {})
            found[(route, method.upper())] = props
    return found


API_QUERY = _api_query_params()
API_BODY_FIELDS = _api_body_fields()

# --- the URL list ---------------------------------------------------------------------------

ENDPOINTS: dict[str, Endpoint] = {e.key: e for e in all_endpoints()}
METHODS: dict[str, set[str]] = {}
for _key, _method in EXPECTED:
    METHODS.setdefault(_key, set()).add(_method)
# The admin's own model pages are Django's (tested upstream); the probe keeps to the pages
# whose query and path handling is this project's, plus two admin lists it customises.
ADMIN_PROBED = {
    *(k for k in CONSOLE_QUERY if k.startswith("admin:")),
    "admin:receipts_app_memorydurablereceipt_change",
    "admin:sessions_app_session_change",
    "admin:operations_app_alertrule_change",
}
PROBED = sorted(key for key in ENDPOINTS if not key.startswith("admin") or key in ADMIN_PROBED)


def area_of(key: str) -> str:
    return next(rule.area for (k, _m), rule in EXPECTED.items() if k == key)


def _is_api_path(path: str) -> bool:
    return path.startswith("/api/") or path.startswith("/metrics")


# --- judging one answer ---------------------------------------------------------------------

LEAK_MARKERS = (
    "Traceback (most recent call last)",
    'File "/',
    "site-packages",
    "SECRET_KEY",
    "django.db.utils",
    "psycopg",
    "sqlite3.",
    "DataError",
    "IntegrityError",
    "OperationalError",
)
API_ERROR_STATUSES = {400, 401, 403, 404, 405, 409, 411, 413, 415, 422, 429}


def complaint(response: Any, path: str, *, viewer: bool) -> str | None:
    """None when the answer is one a hostile request may get; else what is wrong."""
    status = response.status_code
    if status >= 500:
        exc = getattr(response, "exc_info", None)
        return f"{status}: {exc[1]!r}"[:300] if exc else f"{status} server error"
    if response.request["REQUEST_METHOD"] == "HEAD":
        return None  # no body to judge
    body = response.content.decode("utf-8", "replace") if not response.streaming else ""
    for marker in LEAK_MARKERS:
        if marker in body:
            return f"{status}: body shows {marker!r}"
    if viewer and str(settings.BASE_DIR) in body:
        return f"{status}: a viewer is shown the server's path {settings.BASE_DIR}"
    if status < 400:
        return None
    if _is_api_path(path):
        if status not in API_ERROR_STATUSES:
            return f"API answered {status}"
        if path.startswith("/metrics"):
            return None
        if not response.get("Content-Type", "").startswith("application/json"):
            return f"API {status} is not JSON: {response.get('Content-Type')}"
        data = response.json()
        if not isinstance(data, dict) or not data.get("detail"):
            return f"API {status} has no detail: {body[:200]}"
        return None
    if path.startswith("/admin/"):
        return None  # Django's own admin pages
    if "text/html" not in response.get("Content-Type", ""):
        return f"page {status} is not HTML: {response.get('Content-Type')}"
    if len(re.sub(r"<[^>]+>|\s", "", body)) < 10:
        return f"page {status} says nothing: {body[:120]!r}"
    return None


# --- sending --------------------------------------------------------------------------------


def request(principal: Principal, method: str, *args: Any, **kwargs: Any) -> Any:
    """One request in a rolled-back savepoint, the client's cookies kept as they were."""
    cookies = {name: morsel.value for name, morsel in principal.client.cookies.items()}
    headers = {**principal.headers(), **kwargs.pop("headers", {})}
    call = getattr(principal.client, method.lower())
    with transaction.atomic():
        response = call(*args, headers=headers, **kwargs)
        transaction.set_rollback(True)
    principal.client.cookies.clear()
    for name, value in cookies.items():
        principal.client.cookies[name] = value
    return response


def _quiet(principal: Principal) -> Principal:
    principal.client.raise_request_exception = False
    return principal


def strongest(key: str) -> Principal:
    """The principal that gets past the role check of this URL's area."""
    return _quiet(build_principal("token-admin" if area_of(key) == "api" else "superuser"))


def weakest_reader(key: str) -> Principal:
    return _quiet(build_principal("token-read" if area_of(key) == "api" else "viewer"))


def _params_of(endpoint: Endpoint) -> list[str]:
    return re.findall(r"<(?:\w+:)?(\w+)>", endpoint.route)


SLOT = "PROBE-SLOT"


def hostile_paths(endpoint: Endpoint, world: World) -> list[tuple[str, str]]:
    """(label, path) with one path parameter at a time replaced by a hostile value; the
    others keep the values the role matrix fills in (a real receipt, session, plan…)."""
    out: list[tuple[str, str]] = []
    for name in _params_of(endpoint):
        route = re.sub(rf"<(?:\w+:)?{name}>", SLOT, endpoint.route, count=1)
        template = concrete_path(Endpoint(endpoint.key, route, endpoint.methods), world)
        for label, hostile in HOSTILE.items():
            if hostile.strip() == "":
                continue  # an empty segment is another URL (or none), not this one
            out.append((f"{name}={label}", template.replace(SLOT, quote(hostile, safe=""))))
        out.append((f"{name}=broken-utf8", template.replace(SLOT, BROKEN_UTF8)))
    return out


# The API's schema and docs page read no parameter and hold no data: one plain request each
# (building the schema costs ~0.3 s, which a parameter sweep would pay dozens of times).
READS_NO_QUERY = {"api:openapi-json", "api:openapi-view"}


def query_params(key: str, endpoint: Endpoint, method: str) -> tuple[str, ...]:
    if key in READS_NO_QUERY:
        return ()
    if area_of(key) == "api":
        route = endpoint.route.removeprefix("api/v1/")
        route = re.sub(r"<(?:\w+:)?(\w+)>", r"<\1>", route)
        names = API_QUERY.get((f"api/v1/{route}", method), ())
        return names + ("gateway",) if "gateway" not in names else names
    return CONSOLE_QUERY.get(key, ()) + EVERY_PAGE_QUERY


def hostile_queries(key: str, endpoint: Endpoint, method: str) -> list[tuple[str, str]]:
    names = query_params(key, endpoint, method)
    out: list[tuple[str, str]] = []
    for name in names:
        for label in PER_PARAM_VALUES:
            out.append((f"?{name}={label}", f"{name}={quote(HOSTILE[label], safe='')}"))
        out.append((f"?{name}=broken-utf8", f"{name}={BROKEN_UTF8}"))
        out.append((f"?{name} repeated", f"{name}=1&{name}=2&{name}=local&{name}=-5"))
    for label in ALL_PARAMS_VALUES if names else ():
        value = quote(HOSTILE[label], safe="")
        out.append((f"all={label}", "&".join(f"{name}={value}" for name in names)))
    return out


# --- the probes -----------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _fast_and_unthrottled(monkeypatch, settings):
    # The probe's login POSTs must not trip the (separately tested) login rate limit, and its
    # principals and login attempts need no slow password hash (each costs ~0.3 s otherwise).
    monkeypatch.setattr(login_limit, "attempt", lambda *args, **kwargs: False)
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.mark.parametrize("key", PROBED)
def test_hostile_path_and_query_never_break(key, world):
    """Every hostile path parameter and query value, as the strongest principal of the URL's
    area and as a viewer/read token: never a 5xx, a traceback or (for the viewer) a path."""
    endpoint = ENDPOINTS[key]
    methods = sorted(METHODS[key])
    probers = [(strongest(key), False)]
    if not key.startswith("admin"):
        probers.append((weakest_reader(key), True))
    base = concrete_path(endpoint, world)
    failures: list[str] = []
    for principal, viewer in probers:
        for method in methods:
            data = _good_body(key, method, world)
            sends = [(label, path, "") for label, path in hostile_paths(endpoint, world)]
            sends += [(label, base, q) for label, q in hostile_queries(key, endpoint, method)]
            for label, path, query in sends:
                url = f"{path}?{query}" if query else path
                response = request(principal, method, url, **data)
                problem = complaint(response, path, viewer=viewer)
                if problem:
                    failures.append(f"{principal.name} {method} {url[:160]} [{label}]: {problem}")
    assert not failures, f"{len(failures)} hostile requests mishandled:\n" + "\n".join(failures)


def _good_body(key: str, method: str, world: World) -> dict[str, Any]:
    if method in ("GET", "HEAD"):
        return {}
    rule = EXPECTED[(key, method)]
    body = world.fill(rule.body) if rule.body is not None else {}
    if rule.area == "api":
        return {"data": body, "content_type": "application/json"}
    return {"data": body}


def _hostile_json_values() -> dict[str, Any]:
    values: dict[str, Any] = {
        label: HOSTILE[label]
        for label in ("long", "nul", "control", "rtl", "empty", "huge", "traversal", "sql")
    }
    values.update(
        {
            "huge-int": 2**70,
            "negative-int": -(2**63) - 1,
            "float-inf": 1e308 * 10,
            "null": None,
            "list": ["a"],
            "object": {"a": 1},
            "bool": True,
            "lone-surrogate": "\ud800",
        }
    )
    return values


def _json_text(body: Any) -> str:
    # ``float('inf')`` has no JSON spelling: send a number too large for a double instead.
    return json.dumps(body).replace("Infinity", "1e999")


API_UNSAFE = sorted(
    (key, method)
    for (key, method), rule in EXPECTED.items()
    if rule.area == "api" and method in ("POST", "PUT", "PATCH", "DELETE")
)


@pytest.mark.parametrize(("key", "method"), API_UNSAFE)
def test_hostile_api_bodies_get_json_errors(key, method, world):
    """Bad JSON, the wrong content type, non-object bodies and every body field hostile."""
    principal = strongest(key)
    endpoint = ENDPOINTS[key]
    path = concrete_path(endpoint, world)
    good = world.fill(EXPECTED[(key, method)].body) or {}
    route = re.sub(r"<(?:\w+:)?(\w+)>", r"<\1>", endpoint.route)
    fields = list(API_BODY_FIELDS.get((route, method), {})) or list(good)
    sends: list[tuple[str, str, str]] = [
        ("bad json", "{not json", "application/json"),
        ("truncated json", '{"reason": "a', "application/json"),
        ("json array", "[1, 2]", "application/json"),
        ("json string", '"x"', "application/json"),
        ("json null", "null", "application/json"),
        ("form body", "reason=x&session_key=y", "application/x-www-form-urlencoded"),
        ("text body", "hello", "text/plain"),
        ("xml body", "<a>1</a>", "application/xml"),
        ("lone surrogate", '{"reason": "\\ud800", "session_key": "\\udfff"}', "application/json"),
        ("nested deep", "[" * 5000 + "]" * 5000, "application/json"),
        ("duplicate keys", '{"reason": "a", "reason": "b"}', "application/json"),
    ]
    for field_name in fields:
        for label, value in _hostile_json_values().items():
            body = {**good, field_name: value}
            sends.append((f"{field_name}={label}", _json_text(body), "application/json"))
    failures: list[str] = []
    for label, text, content_type in sends:
        response = request(principal, method, path, data=text, content_type=content_type)
        problem = complaint(response, path, viewer=False)
        if problem:
            failures.append(f"{method} {path} [{label}]: {problem}")
    assert not failures, f"{len(failures)} hostile bodies mishandled:\n" + "\n".join(failures)


CONSOLE_UNSAFE = sorted(
    (key, method)
    for (key, method), rule in EXPECTED.items()
    if rule.area in ("console", "public") and method == "POST"
)
# Form fields the console's POST views read beyond the table's good body.
CONSOLE_FIELDS = (
    "reason",
    "gateway",
    "key",
    "selected",
    "scope",
    "status",
    "confirm",
    "apply",
    "repairs",
    "expected_status",
    "expected_updated_at",
    "all_matching",
    "full",
    "agent",
    "fragment",
)
LOGIN_FIELDS = ("username", "password", "next")
FORM_VALUES = ("long", "huge", "below-int64", "negative", "unknown-gateway", "empty")


@pytest.mark.parametrize(("key", "method"), CONSOLE_UNSAFE)
def test_hostile_console_forms_get_a_message(key, method, world):
    """Each form field hostile, repeated, and the form without its CSRF token."""
    principal = strongest(key)
    path = concrete_path(ENDPOINTS[key], world)
    good = world.fill(EXPECTED[(key, method)].body) or {}
    failures: list[str] = []
    sends: list[tuple[str, dict[str, Any]]] = []
    names = set(good) | (set(LOGIN_FIELDS if key in ("login", "admin:login") else CONSOLE_FIELDS))
    for name in sorted(names):
        for label in FORM_VALUES:
            sends.append((f"{name}={label}", {**good, name: HOSTILE[label]}))
        sends.append((f"{name} repeated", {**good, name: ["1", "2", "local"]}))
    for label in ALL_PARAMS_VALUES:
        sends.append((f"all={label}", {name: HOSTILE[label] for name in names}))
    for label, data in sends:
        # An htmx form gets its message in the page's message area: judged the same way.
        for htmx in (False, True) if label.startswith("all=") else (False,):
            headers = {"HX-Request": "true"} if htmx else {}
            response = request(principal, method, path, data=data, headers=headers)
            problem = complaint(response, path, viewer=False)
            if problem:
                failures.append(f"{method} {path} [{label}, htmx={htmx}]: {problem}")
    # Without a CSRF token: a 403 page, never a change and never a 500.
    strict = Client(enforce_csrf_checks=True, raise_request_exception=False)
    strict.cookies = principal.client.cookies
    before = _ledger_state()
    response = strict.post(path, data=good)
    if response.status_code != 403:
        failures.append(f"{method} {path} without CSRF: wanted 403, got {response.status_code}")
    elif complaint(response, path, viewer=False):
        failures.append(f"{method} {path} without CSRF: {complaint(response, path, viewer=False)}")
    assert _ledger_state() == before, f"{path} without CSRF changed the ledger"
    assert not failures, f"{len(failures)} hostile forms mishandled:\n" + "\n".join(failures)


# --- read-only principals -------------------------------------------------------------------


def _ledger_state() -> tuple[int, ...]:
    return (
        Session.objects.count(),
        TranscriptEntry.objects.count(),
        MemoryDurableReceipt.objects.count(),
        ReceiptEvent.objects.count(),
        RequeuePlan.objects.count(),
        hash(tuple(MemoryDurableReceipt.objects.values_list("status", "attempt_count"))),
    )


UNSAFE_FOR_READERS = sorted(
    (key, method)
    for (key, method), rule in EXPECTED.items()
    if method != "GET" and OPERATOR <= rule.level < NOBODY and rule.area in ("api", "console")
)


@pytest.mark.parametrize("who", ["viewer", "token-read", "anonymous"])
def test_read_only_principals_change_nothing(who, world):
    """Every unsafe request, well-formed and hostile, as a viewer / read token: 403 and the
    ledger unchanged; as anonymous: the login page (302) or 401 JSON."""
    principal = _quiet(build_principal(who))
    before = _ledger_state()
    failures: list[str] = []
    assert UNSAFE_FOR_READERS and all(
        EXPECTED[k].level in (OPERATOR, ADMIN) for k in UNSAFE_FOR_READERS
    )
    for key, method in UNSAFE_FOR_READERS:
        rule = EXPECTED[(key, method)]
        if who == "token-read" and rule.area != "api":
            continue  # tokens open the API only (the role matrix checks the console refuses)
        path = concrete_path(ENDPOINTS[key], world)
        good = world.fill(rule.body) if rule.body is not None else {}
        for body in (good, {k: LONG for k in good} or {"reason": LONG}):
            if rule.area == "api":
                kwargs: dict[str, Any] = {"data": body, "content_type": "application/json"}
            else:
                kwargs = {"data": body}
            # Outside a savepoint on purpose: a refused request must change nothing itself.
            headers = principal.headers()
            response = getattr(principal.client, method.lower())(path, headers=headers, **kwargs)
            status = response.status_code
            if who == "anonymous":
                wanted = 401 if rule.area == "api" else 302
                ok = status == wanted and (
                    wanted == 401 or response["Location"].startswith("/accounts/login/")
                )
            else:
                ok = status == 403
            if not ok:
                failures.append(f"{who} {method} {path}: got {status}")
            elif complaint(response, path, viewer=True):
                failures.append(f"{who} {method} {path}: {complaint(response, path, viewer=True)}")
    assert _ledger_state() == before, f"{who} changed the ledger"
    assert not failures, "\n".join(failures)


# --- headers and the remaining methods ------------------------------------------------------

# Django's test client passes header values through as given (a real server would refuse
# some of these at the HTTP layer first; the app must not rely on that).
HOSTILE_HEADERS: list[tuple[str, dict[str, str]]] = [
    ("bearer long", {"Authorization": "Bearer " + LONG}),
    ("bearer control", {"Authorization": "Bearer a\x01\x7fb"}),
    ("bearer rtl", {"Authorization": "Bearer \u202eabc"}),
    ("bearer empty", {"Authorization": "Bearer "}),
    ("bearer twice", {"Authorization": "Bearer a Bearer b"}),
    ("basic", {"Authorization": "Basic YWRtaW46YWRtaW4="}),
    ("scheme only", {"Authorization": "Bearer"}),
    ("idempotency long", {"Idempotency-Key": LONG}),
    ("idempotency control", {"Idempotency-Key": "k\x01\x7f"}),
    ("idempotency emoji", {"Idempotency-Key": "\U0001f990"}),
    ("idempotency empty", {"Idempotency-Key": ""}),
    ("htmx odd", {"HX-Request": "true", "HX-Current-URL": "javascript:alert(1)"}),
    ("htmx target", {"HX-Request": "true", "HX-Target": "'><script>", "HX-Trigger": LONG}),
    ("forwarded-for", {"X-Forwarded-For": "not-an-ip, ' OR 1=1 --, " + LONG}),
    ("accept odd", {"Accept": "application/xml;q=2, */*;q=-1"}),
    ("if-none-match", {"If-None-Match": LONG, "If-Modified-Since": "yesterday"}),
    ("range", {"Range": "bytes=-99999999999999999999"}),
]


def _with_auth(principal: Principal, extra: dict[str, str]) -> dict[str, str]:
    return {**principal.headers(), **extra}


@pytest.mark.parametrize("key", [k for k in PROBED if not k.startswith("admin")])
def test_hostile_headers_and_methods_never_break(key, world):
    """Odd Authorization, Idempotency-Key, htmx and proxy headers, and HEAD/OPTIONS: never a
    5xx or a traceback; a malformed credential under /api/ is a 401 JSON, not a guess."""
    principal = strongest(key)
    path = concrete_path(ENDPOINTS[key], world)
    failures: list[str] = []
    for method in sorted(METHODS[key]):
        data = _good_body(key, method, world)
        for label, extra in HOSTILE_HEADERS:
            headers = _with_auth(principal, extra)
            cookies = {n: m.value for n, m in principal.client.cookies.items()}
            with transaction.atomic():
                call = getattr(principal.client, method.lower())
                response = call(path, headers=headers, **data)
                transaction.set_rollback(True)
            principal.client.cookies.clear()
            for name, value in cookies.items():
                principal.client.cookies[name] = value
            problem = complaint(response, path, viewer=False)
            if problem is None and label.startswith("bearer") and path.startswith("/api/v1/"):
                if EXPECTED[(key, method)].level > 0 and response.status_code != 401:
                    problem = f"a malformed Bearer token answered {response.status_code}"
            if problem:
                failures.append(f"{method} {path} [{label}]: {problem}")
    wrong = {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "TRACE"} - METHODS[key]
    for method in sorted(wrong):
        response = request(principal, "generic", method, path)
        problem = complaint(response, path, viewer=False)
        if problem:
            failures.append(f"{method} {path}: {problem}")
    assert not failures, f"{len(failures)} hostile headers mishandled:\n" + "\n".join(failures)
