"""Issue 22's probe: a ``checkpoint_failed`` receipt with a 100,000-character reason made every
later fold time out, and on SQLite small writes meanwhile got "database is locked" 500s.

Here, on the project's own database (on SQLite a file in WAL mode, as the embedded default
runs): several such reasons are stored, the beat's fold runs while other threads keep making
small API writes, and every write is answered 2xx (or a clean 503 JSON with Retry-After, never
a 500), the fold finishes with the new failures grouped, and no count is negative.
"""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connection, connections
from django.test import Client

from opensquilla_site.tokens import create_api_token
from receipts_app import counts, failure_groups, tasks
from receipts_app.ledger.triggers import GROUPS
from tests.conftest import is_postgres, unique_name
from tests.factories import make_user

pytestmark = pytest.mark.django_db(transaction=True)

API = "/api/v1"
LONG = 100_000
WRITERS = 3
WRITES_PER_WRITER = 25


def _failed(key: str, n: int, reason: str) -> dict:
    return {
        "session_key": key,
        "session_id": "gen-1",
        "turn_id": f"t{n}",
        "scope": "checkpoint",
        "idempotency_key": f"checkpoint:{key}:t{n}",
        "status": "checkpoint_failed",
        "reason": reason,
        "attempt_count": 1,
    }


def _long_reason(n: int) -> str:
    # Digits, paths and hex runs all through: what the masks work on.
    return (f"disk full at /var/lib/x{n}/ab12cd34ef 9{n} " * (LONG // 30))[:LONG]


def _answered_well(response) -> bool:
    if 200 <= response.status_code < 300:
        return True
    if response.status_code == 503:  # a clean "try again", never a bare error page
        body = json.loads(response.content)
        return bool(response.headers.get("Retry-After")) and "error" in body
    return False


def test_long_reasons_fold_while_small_writes_are_all_answered():
    # An earlier transactional test's flush can leave count deltas of rows it deleted (the
    # triggers fire on the flush's DELETEs); start from counts that match the empty table, so
    # the drift asserted below is this test's own.
    counts.rebuild_counts()
    if not is_postgres():
        with connection.cursor() as cur:
            cur.execute("PRAGMA journal_mode")
            assert cur.fetchone()[0] == "wal"
    user = make_user(unique_name("folder"), "operator")
    _token, token = create_api_token(user=user, name="fold-probe", scope="operate")
    headers = {"Authorization": f"Bearer {token}"}
    client = Client()

    def put(body: dict, http: Client = client):
        return http.put(
            API + "/receipts",
            data=json.dumps(body),
            content_type="application/json",
            headers=headers,
        )

    long_key = "agent:main:webchat:long-reasons"
    for n in range(5):
        assert put(_failed(long_key, n, _long_reason(n))).status_code == 200

    answers: list[tuple[str, int, bool]] = []  # (what, status, a clean answer)
    lock = threading.Lock()
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        http = Client()
        try:
            for i in range(WRITES_PER_WRITER):
                key = f"agent:main:webchat:small-{w}-{i}"
                if i % 3 == 0:
                    what = "session"
                    response = http.post(
                        API + "/sessions",
                        data=json.dumps({"session_key": key}),
                        content_type="application/json",
                        headers=headers,
                    )
                elif i % 3 == 1:
                    what = "failure"
                    response = put(_failed(key, i, f"small failure {i}"), http)
                else:  # another long one arriving while the fold runs
                    what = "failure"
                    response = put(_failed(f"{long_key}-{w}", i, _long_reason(i)), http)
                with lock:
                    answers.append((what, response.status_code, _answered_well(response)))
        except BaseException as exc:  # noqa: BLE001 - reported below, on the main thread
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    for thread in threads:
        thread.start()
    folds = []
    while any(thread.is_alive() for thread in threads):
        folds.append(tasks.fold_ledger_aggregates())
    for thread in threads:
        thread.join()
    folds.append(tasks.fold_ledger_aggregates())  # and what arrived after the last one

    assert not errors, errors
    assert len(answers) == WRITERS * WRITES_PER_WRITER
    assert all(clean for _, _, clean in answers), [a for a in answers if not a[2]]
    assert not [code for _, code, _ in answers if code >= 500 and code != 503]

    # Every failure stored is grouped, exactly as a regrouping from the table counts them.
    stored_failures = 5 + sum(1 for what, code, _ in answers if what == "failure" and code == 200)
    assert sum(f["failures_grouped"] for f in folds) >= stored_failures
    groups = failure_groups.stored()
    assert groups == failure_groups.recompute()
    assert sum(groups.values()) == stored_failures
    assert not counts.find_drift()
    with connection.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM {GROUPS} WHERE count < 0")  # noqa: S608
        assert cur.fetchone()[0] == 0
