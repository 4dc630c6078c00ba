"""Hostile input end to end: path traversal, oversized bodies, markup in every text field,
and garbage SQLite files fed to the importer.

Every case states what the user sees: a JSON error with the right code, a page with a
message, a failed import that wrote nothing. Never a 500, never a file outside the
workspaces, never unescaped markup.
"""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
from collections import Counter
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import transaction
from django.test import Client
from django.urls import reverse

from opensquilla_site.tokens import create_api_token
from receipts_app.audit import Actor
from receipts_app.importer import ImportSourceError, import_opensquilla
from receipts_app.management import cli
from receipts_app.models import MemoryDurableReceipt
from receipts_app.requeue import create_requeue_plan
from sessions_app.models import Session, TranscriptEntry
from sessions_app.services import append_message, create_session
from tests.api.conftest import ApiCaller, assert_error
from tests.factories import make_session, make_user

pytestmark = pytest.mark.django_db

SECRET = "TOP-SECRET-OUTSIDE-THE-WORKSPACE"


@pytest.fixture
def operator_api(db) -> ApiCaller:
    user = make_user("bad-input-op", "operator")
    _token, plaintext = create_api_token(user=user, name="bad-input", scope="operate")
    return ApiCaller(Client(), plaintext)


@pytest.fixture
def viewer(db) -> Client:
    make_user("bad-input-viewer", "viewer")
    client = Client()
    client.login(username="bad-input-viewer", password="pw-Secret-123")
    return client


@pytest.fixture
def outside_secret(tmp_path) -> Path:
    secret = tmp_path / "outside" / "secret.jsonl"
    secret.parent.mkdir()
    secret.write_text(SECRET)
    return secret


def receipt_body(**fields) -> dict:
    body = {
        "session_key": "agent:main:webchat:bad",
        "session_id": "bad-session",
        "scope": "checkpoint",
        "idempotency_key": f"bad:{fields.get('source_path', '')}:{fields.get('target_path', '')}",
        "status": "checkpoint_saved",
    }
    body.update(fields)
    return body


def files_outside(root: Path, workspace: Path, known: set[Path]) -> list[Path]:
    return [
        p
        for p in root.rglob("*")
        if p.is_file() and workspace not in p.parents and p.resolve() not in known
    ]


# --- path traversal -------------------------------------------------------------------------


TRAVERSALS = [
    "../outside/secret.jsonl",
    "../../outside/secret.jsonl",
    "memory/.checkpoints/../../../outside/secret.jsonl",
    "memory/.checkpoints/..\\..\\..\\outside\\secret.jsonl",
    "./././../outside/secret.jsonl",
    "%2e%2e/outside/secret.jsonl",
    "link-out.jsonl",  # a symlink inside the workspace pointing outside
]


@pytest.mark.parametrize("column", ["source_path", "target_path"])
def test_receipt_paths_that_escape_are_stored_as_text_but_never_previewed(
    column, operator_api, viewer, workspace, outside_secret
):
    (workspace / "link-out.jsonl").symlink_to(outside_secret)
    for value in [*TRAVERSALS, str(outside_secret)]:
        response = operator_api.put("/receipts", receipt_body(**{column: value}))
        assert response.status_code == 200, response.content
        stored = response.json()
        assert stored[column] == value  # the ledger keeps what it was told

        page = viewer.get(reverse("receipts:detail", args=[stored["receipt_id"]]))
        assert page.status_code == 200, value
        html = page.content.decode()
        assert SECRET not in html, value
        assert "not in a configured workspace" in html, value


@pytest.mark.parametrize("column", ["source_path", "target_path", "turn_id", "reason"])
def test_nul_in_any_receipt_text_is_a_422_and_stores_nothing(column, operator_api):
    response = operator_api.put("/receipts", receipt_body(**{column: "memory/x\x00.jsonl"}))
    assert_error(response, 422, "validation_error")
    assert not MemoryDurableReceipt.objects.exists()


def test_patching_a_path_to_escape_never_exposes_the_file(
    operator_api, viewer, workspace, outside_secret
):
    (workspace / "inside.jsonl").write_text("INSIDE")
    stored = operator_api.put("/receipts", receipt_body(source_path="inside.jsonl")).json()
    page = viewer.get(reverse("receipts:detail", args=[stored["receipt_id"]])).content.decode()
    assert "INSIDE" in page  # the preview works for a file that is inside

    for value in ("../outside/secret.jsonl", str(outside_secret)):
        patched = operator_api.patch(f"/receipts/{stored['receipt_id']}", {"source_path": value})
        assert patched.status_code == 200
        page = viewer.get(reverse("receipts:detail", args=[stored["receipt_id"]]))
        assert SECRET not in page.content.decode()


@pytest.mark.parametrize(
    "session_key, turn_id",
    [
        ("agent:main:../../../../escape", "../../../../escape"),
        ("agent:main:/etc/passwd", "/etc/passwd"),
        ("agent:main:..", ".."),
        ("agent:main:a/../../b", "memory/.checkpoints/../../x"),
        ("agent:main:..\\..\\win", "..\\..\\win"),
    ],
)
def test_checkpoint_keys_and_turn_ids_cannot_write_outside_the_workspace(
    session_key, turn_id, operator_api, workspace, tmp_path
):
    known = {p.resolve() for p in tmp_path.rglob("*") if p.is_file()}
    created = operator_api.post("/sessions", {"session_key": session_key})
    assert created.status_code == 201, created.content
    key = created.json()["session_key"]
    append_message(key, role="user", content="hello")

    response = operator_api.post(
        f"/sessions/{quote(key, safe=':/')}/checkpoints?wait=true", {"turn_id": turn_id}
    )

    assert response.status_code == 200, response.content
    saved = response.json()
    assert saved["status"] == "checkpoint_saved"
    target = (workspace / saved["source_path"]).resolve()
    assert workspace.resolve() in target.parents and target.is_file()
    assert ".." not in Path(saved["source_path"]).parts
    assert files_outside(tmp_path, workspace, known) == []


def test_nul_in_a_turn_id_is_a_422_and_writes_nothing(operator_api, workspace):
    session = make_session("agent:main:webchat:nul", messages=1)
    response = operator_api.post(
        f"/sessions/{session.session_key}/checkpoints?wait=true", {"turn_id": "a\x00b"}
    )
    assert_error(response, 422, "validation_error")
    assert not MemoryDurableReceipt.objects.exists()
    assert not any(p.is_file() for p in workspace.rglob("*"))


# PostgreSQL text cannot hold NUL. Found by this suite: a NUL in a URL path reached the query
# as a DataError (a 500); fixed in 723b18f by refusing NUL once, in a middleware.


@pytest.mark.parametrize(
    "method, path",
    [
        ("POST", "/sessions/agent:main:x%00y/checkpoints?wait=true"),
        ("GET", "/sessions/agent:main:x%00y"),
        ("GET", "/receipts/a%00b"),
        ("GET", "/receipts/a%00b/events"),
        ("GET", "/requeue-plans/a%00b"),
    ],
)
def test_nul_in_an_api_path_is_a_json_error_not_a_500(method, path, operator_api):
    response = operator_api.send(method, path, {} if method == "POST" else None)
    # Refused before any view: the same 422 on every route, naming what is wrong.
    assert response.status_code == 422, response.content
    body = response.json()
    assert body["code"] == "validation_error"
    assert "NUL character" in body["detail"]


@pytest.mark.parametrize(
    "path",
    [
        "/receipts/a%00b/",
        "/sessions/s/agent:main:x%00y",
        "/session-memory/?key=agent:main:x%00y",
        "/plans/a%00b/",
        "/sessions/?q=a%00b",
    ],
)
def test_nul_in_console_urls_is_a_message_not_a_500(viewer, path):
    response = viewer.get(path)
    assert response.status_code == 400, (path, response.status_code)
    assert "contains a NUL character" in response.content.decode(), path


def test_nul_in_a_console_filter_is_a_message(viewer):
    response = viewer.get("/receipts/?session_key=a%00b")
    assert response.status_code == 400
    assert "Those filters need fixing" in response.content.decode()


@pytest.mark.parametrize(
    "path",
    [
        "../../../etc/passwd",
        "memory/.raw_fallbacks/../../../../etc/passwd",
        "C:\\Windows\\win.ini",
        "..\\..\\boot.ini",
        "/var/lib/secret.md",
    ],
)
def test_import_of_a_db_whose_receipt_paths_escape_imports_nothing(
    path, golden_dir, tmp_path, settings
):
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(tmp_path / "ours")
    settings.OPENSQUILLA_MEMORY_WORKSPACE = None
    db = tmp_path / "escape.db"
    shutil.copyfile(golden_dir / "opensquilla-0.3.0" / "sessions.db", db)
    conn = sqlite3.connect(db)
    conn.execute(
        "UPDATE memory_durable_receipts SET target_path = ? "
        "WHERE receipt_id = (SELECT receipt_id FROM memory_durable_receipts LIMIT 1)",
        (path,),
    )
    conn.commit()
    conn.close()
    with pytest.raises(ImportSourceError, match="import refused"):
        import_opensquilla(db_path=db, workspace=golden_dir / "opensquilla-0.3.0" / "workspace")
    assert (Session.objects.count(), MemoryDurableReceipt.objects.count()) == (0, 0)
    assert not (tmp_path / "ours").exists() or not any(
        p.is_file() for p in (tmp_path / "ours").rglob("*")
    )


# --- oversized bodies -----------------------------------------------------------------------


def test_an_oversized_upsert_is_a_413_json_error(operator_api):
    huge = receipt_body(reason="x" * (3 * 1024 * 1024))
    body = assert_error(operator_api.put("/receipts", huge), 413, "payload_too_large")
    assert body["limit_bytes"] == 2 * 1024 * 1024
    assert not MemoryDurableReceipt.objects.exists()


def test_a_bulk_body_over_the_site_limit_is_a_413_json_error(operator_api):
    rows = [receipt_body(idempotency_key=f"big:{i}", reason="y" * 9000) for i in range(1000)]
    raw = json.dumps({"receipts": rows})
    assert len(raw) > 8 * 1024 * 1024
    assert_error(operator_api.post("/receipts/bulk", raw=raw), 413, "payload_too_large")
    assert not MemoryDurableReceipt.objects.exists()


@pytest.mark.parametrize(
    "path, make_body",
    [
        ("/sessions", lambda: {"session_key": "agent:main:" + "k" * (3 * 1024 * 1024)}),
        ("/requeue-plans", lambda: {"receipt_ids": ["r" * 100] * 30_000}),
        ("/tokens", lambda: {"name": "n" * (3 * 1024 * 1024)}),
    ],
)
def test_every_write_refuses_a_body_over_its_limit(path, make_body, db):
    user = make_user("big-admin", "admin")
    _token, plaintext = create_api_token(user=user, name="big", scope="admin")
    caller = ApiCaller(Client(), plaintext)
    assert_error(caller.post(path, make_body()), 413, "payload_too_large")


def test_an_oversized_console_post_is_refused_without_a_500(db):
    make_user("big-op", "operator")
    client = Client()
    client.login(username="big-op", password="pw-Secret-123")
    response = client.post(reverse("receipts:plan_create"), {"reason": "z" * (9 * 1024 * 1024)})
    assert response.status_code == 400
    assert not MemoryDurableReceipt.objects.exists()


# --- markup in every text field -------------------------------------------------------------

PAYLOADS = (
    "<script>xss(1)</script>",
    '"><img src=x onerror=xss(2)>',
    "'><svg onload=xss(3)>",
)


@pytest.fixture
def hostile(db, workspace):
    """One of everything an operator can see, each text field carrying markup."""
    p1, p2, p3 = PAYLOADS
    session = create_session(f"agent:main:webchat:{p1}")
    append_message(session.session_key, role="user", content=f"{p1} {p2} {p3}")
    append_message(session.session_key, role="assistant", content=p2, reasoning_content=p3)
    user = make_user("markup-op", "operator")
    _token, plaintext = create_api_token(user=user, name=p2, scope="operate")
    caller = ApiCaller(Client(), plaintext)
    stored = []
    for index, (status, scope) in enumerate(
        [("checkpoint_failed", "checkpoint"), ("repair_abandoned", "repair"), (p1, p3)]
    ):
        response = caller.put(
            "/receipts",
            {
                "session_key": session.session_key,
                "session_id": session.session_id,
                "turn_id": f"{p1}{index}",
                "scope": scope,
                "idempotency_key": f"{p2}{index}",
                "status": status,
                "reason": f"{p1}{p2}{p3}",
                "source_path": p3,
                "target_path": p1,
            },
        )
        assert response.status_code == 200, response.content
        stored.append(response.json())
    plan = create_requeue_plan(
        filters={"reason": p1},
        receipt_ids=None,
        actor=Actor(name=f"op {p3}", surface="console"),
        reason=p2,
    )
    return {"session": session, "receipts": stored, "plan": plan}


def test_markup_in_every_text_field_is_escaped_on_every_console_page(hostile, viewer):
    admin = Client()
    make_user("markup-admin", "admin")
    admin.login(username="markup-admin", password="pw-Secret-123")
    session = hostile["session"]
    receipt_id = hostile["receipts"][0]["receipt_id"]
    plan_id = hostile["plan"].plan_id
    p1 = quote(PAYLOADS[0])
    pages = [
        (viewer, reverse("receipts:overview")),
        (viewer, reverse("receipts:list")),
        (viewer, reverse("receipts:list") + f"?reason={p1}&session_key={p1}&status={p1}"),
        (viewer, reverse("receipts:new_count") + f"?since=&reason={p1}"),
        *[
            (viewer, reverse("receipts:detail", args=[r["receipt_id"]]))
            for r in hostile["receipts"]
        ],
        (viewer, reverse("receipts:plans")),
        (viewer, reverse("receipts:plan_detail", args=[plan_id])),
        (viewer, reverse("receipts:plan_progress", args=[plan_id])),
        (viewer, reverse("receipts:audit")),
        (viewer, reverse("receipts:audit") + f"?actor={p1}&action={p1}"),
        (viewer, reverse("sessions:list")),
        (viewer, reverse("sessions:list") + f"?q={p1}&agent={p1}"),
        (viewer, reverse("sessions:detail", args=[session.session_key])),
        (viewer, reverse("receipts:session_memory") + f"?key={quote(session.session_key)}"),
        (viewer, reverse("receipts:detail", args=[PAYLOADS[0]])),  # the 404 page echoes
        (admin, reverse("admin:receipts_app_memorydurablereceipt_changelist")),
        (admin, reverse("admin:receipts_app_memorydurablereceipt_change", args=[receipt_id])),
        (admin, reverse("admin:receipts_app_receiptevent_changelist")),
        (admin, reverse("admin:sessions_app_session_changelist")),
        (admin, reverse("admin:sessions_app_transcriptentry_changelist")),
        (admin, reverse("admin:receipts_app_requeueplan_changelist")),
    ]
    shown = 0
    for client, url in pages:
        response = client.get(url)
        assert response.status_code < 500, url
        html = response.content.decode()
        for payload in PAYLOADS:
            assert payload not in html, (url, payload)
        shown += html.count("&lt;script&gt;xss(1)&lt;/script&gt;")
    assert shown > 10  # the payloads were really rendered, escaped, on the pages


# --- importer fuzz --------------------------------------------------------------------------

FUZZ_INPUTS = 50
FUZZ_SEED = 20260601


def _mutate(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One deterministic corruption of a SQLite file."""
    page = 4096
    kind = rng.choice(["flip", "truncate", "zero-page", "garbage-page", "header", "shuffle"])
    buf = bytearray(data)
    if kind == "flip":
        for _ in range(rng.randint(1, 64)):
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        del buf[rng.randrange(1, len(buf)) :]
    elif kind in ("zero-page", "garbage-page"):
        start = rng.randrange(len(buf) // page) * page
        filler = bytes(page) if kind == "zero-page" else rng.randbytes(page)
        buf[start : start + page] = filler
    elif kind == "header":
        for _ in range(rng.randint(1, 8)):
            buf[rng.randrange(100)] = rng.randrange(256)
    else:
        a, b = (rng.randrange(len(buf) // page) * page for _ in range(2))
        buf[a : a + page], buf[b : b + page] = buf[b : b + page], buf[a : a + page]
    return kind, bytes(buf)


def test_import_fuzz_either_imports_cleanly_or_refuses_and_imports_nothing(
    golden_dir, tmp_path, settings
):
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(tmp_path / "ours")
    settings.OPENSQUILLA_MEMORY_WORKSPACE = None
    golden = (golden_dir / "opensquilla-0.3.0" / "sessions.db").read_bytes()
    rng = random.Random(FUZZ_SEED)
    outcomes: Counter[str] = Counter()
    crashes: list[str] = []
    for index in range(FUZZ_INPUTS):
        kind, data = _mutate(golden, rng)
        source = tmp_path / f"fuzz-{index}.db"
        source.write_bytes(data)
        with transaction.atomic():
            try:
                report = import_opensquilla(db_path=source, workspace=None)
            except ImportSourceError as exc:
                # What ``manage.py import_opensquilla`` prints: one line, no traceback.
                message = cli.error_text(exc)
                assert message and "\n" not in message and "Traceback" not in message
                counts = (
                    Session.objects.count(),
                    TranscriptEntry.objects.count(),
                    MemoryDurableReceipt.objects.count(),
                )
                if counts != (0, 0, 0):
                    crashes.append(f"#{index} {kind}: refused but left rows {counts}")
                outcomes["refused"] += 1
            except Exception as exc:  # noqa: BLE001 - any other error is a finding
                crashes.append(f"#{index} {kind}: {type(exc).__name__}: {exc}")
                outcomes["crashed"] += 1
            else:
                assert report.receipts.created == MemoryDurableReceipt.objects.count()
                outcomes["imported"] += 1
            transaction.set_rollback(True)
        source.unlink()
    print(f"import fuzz: {FUZZ_INPUTS} inputs (seed {FUZZ_SEED}): {dict(outcomes)}")
    assert sum(outcomes.values()) == FUZZ_INPUTS
    assert crashes == [], "\n".join(crashes)
    assert outcomes["refused"] > 0  # the corruptions really reach the checks
