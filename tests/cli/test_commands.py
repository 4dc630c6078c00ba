"""The management commands as an operator runs them: output, exit status, effects."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from opensquilla_site.tokens import authenticate_token
from receipts_app.management.commands import export_receipts
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent, RequeuePlan
from sessions_app.models import Session, TranscriptEntry
from tests.factories import make_receipt, make_session, make_user
from tests.receipts_app.requeue_support import (  # noqa: F401
    failed_checkpoint,
    repair_row,
    sent_fixture,
)

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]
NULLABLE_INTS = {"coverage_entry_count", "next_retry_at_ms"}
INTS = {"attempt_count", "created_at", "updated_at", "schema_version"} | NULLABLE_INTS


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def ledger_rows():
    rows = [
        make_receipt(status="checkpoint_failed", reason="disk full", created_at=1_000 + i)
        for i in range(3)
    ]
    rows.append(
        make_receipt(
            session_key="agent:ops:discord:group:1",
            scope="repair",
            status="repair_abandoned",
            reason='empty_raw_excerpt, "quoted"\nsecond line',
            attempt_count=4,
            target_path="memory/.raw_fallbacks/a.md",
            created_at=2_000,
        )
    )
    rows.append(make_receipt(status="checkpoint_saved", coverage_entry_count=3, created_at=3_000))
    return rows


def db_record(receipt_id: str) -> dict:
    row = MemoryDurableReceipt.objects.get(receipt_id=receipt_id)
    # The gateway is exported by name (its column), as the API names it.
    column = {"gateway": "gateway_id"}
    return {name: getattr(row, column.get(name, name)) for name in export_receipts.EXPORT_FIELDS}


def test_export_jsonl_round_trips_every_column(ledger_rows, tmp_path):
    target = tmp_path / "out.jsonl"
    _out, err = run("export_receipts", "--format", "jsonl", "--output", str(target))
    records = [json.loads(line) for line in target.read_text().splitlines()]
    assert len(records) == 5 and "exported 5 receipts" in err
    for record in records:
        assert record == db_record(record["receipt_id"])
    # Newest first, the console's order.
    assert [r["created_at"] for r in records] == sorted(
        (r["created_at"] for r in records), reverse=True
    )


def test_export_csv_round_trips_with_null_as_empty(ledger_rows, tmp_path):
    target = tmp_path / "out.csv"
    run("export_receipts", "--format", "csv", "--output", str(target))
    with target.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 5
    for row in rows:
        expected = db_record(row["receipt_id"])
        for name, value in row.items():
            want = expected[name]
            if want is None:
                assert value == ""
            elif name in INTS:
                assert int(value) == want
            else:
                assert value == want
    assert any("\n" in r["reason"] for r in rows)  # multi-line reasons survive quoting


def test_export_filters_match_the_api_filter(ledger_rows):
    out, _ = run("export_receipts", "--status", "checkpoint_failed")
    assert {json.loads(line)["status"] for line in out.splitlines()} == {"checkpoint_failed"}
    assert len(out.splitlines()) == 3

    out, _ = run("export_receipts", "--agent", "ops", "--filter", "attempts_min=4")
    assert [json.loads(line)["status"] for line in out.splitlines()] == ["repair_abandoned"]

    out, _ = run(
        "export_receipts", "--filter", "scope=checkpoint", "--created-to", "1970-01-01T00:00:01.001"
    )
    assert sorted(json.loads(line)["created_at"] for line in out.splitlines()) == [1000, 1001]


def test_every_exported_row_names_its_gateway(tmp_path):
    from sessions_app.gateways import ensure_gateway, using_gateway

    ensure_gateway("edge")
    key = "agent:main:webchat:default"
    local = make_receipt(session_key=key, status="checkpoint_failed")
    with using_gateway("edge"):
        edge = make_receipt(session_key=key, status="checkpoint_failed")
    out, _ = run("export_receipts", "--format", "jsonl")
    assert {
        json.loads(line)["receipt_id"]: json.loads(line)["gateway"] for line in out.splitlines()
    } == {
        local.receipt_id: "local",
        edge.receipt_id: "edge",
    }
    target = tmp_path / "edge.csv"
    run("export_receipts", "--format", "csv", "--gateway", "edge", "--output", str(target))
    with target.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["receipt_id"], r["gateway"], r["session_key"]) for r in rows] == [
        (edge.receipt_id, "edge", key)
    ]


def test_export_walks_every_page_once(ledger_rows, monkeypatch):
    monkeypatch.setattr(export_receipts, "PAGE_SIZE", 2)
    out, _ = run("export_receipts")
    ids = [json.loads(line)["receipt_id"] for line in out.splitlines()]
    assert sorted(ids) == sorted(r.receipt_id for r in ledger_rows)


def test_requeue_dry_run_counts_outcomes_and_changes_nothing(sent):
    session = make_session(messages=2)
    failed = failed_checkpoint(session)
    abandoned = repair_row("repair_abandoned")
    saved = make_receipt(status="checkpoint_saved", created_at=1)
    out, _ = run(
        "requeue",
        "--receipt-id",
        failed.receipt_id,
        "--receipt-id",
        abandoned.receipt_id,
        "--receipt-id",
        saved.receipt_id,
        "--dry-run",
    )
    assert "3 receipts matched" in out
    assert "not_requeueable: 1, requeued: 2" in out
    assert failed.receipt_id in out and "dry run: nothing changed" in out
    assert MemoryDurableReceipt.objects.get(pk=failed.pk).status == "checkpoint_failed"
    assert MemoryDurableReceipt.objects.get(pk=abandoned.pk).status == "repair_abandoned"
    assert RequeuePlan.objects.get().state == "previewed"
    assert sent == []


def test_requeue_executes_the_plan_and_records_the_cli_actor(
    sent, django_capture_on_commit_callbacks
):
    session = make_session(messages=2)
    failed = failed_checkpoint(session)
    abandoned = repair_row("repair_abandoned")
    with django_capture_on_commit_callbacks(execute=True):
        out, _ = run(
            "requeue",
            "--status",
            "checkpoint_failed",
            "--status",
            "repair_abandoned",
            "--reason",
            "disk replaced",
            "--actor",
            "frank",
        )
    assert "results: requeued: 2" in out and "done" in out
    assert MemoryDurableReceipt.objects.get(pk=failed.pk).status == "checkpoint_requeued"
    assert MemoryDurableReceipt.objects.get(pk=abandoned.pk).status == "repair_pending"
    events = ReceiptEvent.objects.filter(outcome="requeued")
    assert {(e.actor, e.surface, e.reason) for e in events} == {("frank", "cli", "disk replaced")}
    assert sorted(name for name, *_ in sent if name != "run_requeue_plan") == [
        "checkpoint_session",
        "repair_receipt",
    ]


def test_requeue_can_execute_a_previewed_plan(sent):
    abandoned = repair_row("repair_abandoned")
    run("requeue", "--receipt-id", abandoned.receipt_id, "--dry-run")
    plan = RequeuePlan.objects.get()
    out, _ = run("requeue", "--plan", plan.plan_id)
    assert "requeued: 1" in out
    assert MemoryDurableReceipt.objects.get(pk=abandoned.pk).status == "repair_pending"


def test_repair_once_runs_one_tick(tmp_path, settings):
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(tmp_path)
    settings.OPENSQUILLA_MEMORY_WORKSPACE = None
    row = repair_row(
        "repair_pending",
        session_key="agent:main:webchat:r",
        target_path="memory/.raw_fallbacks/missing.md",
        attempt_count=0,
    )
    out, _ = run("repair_once")
    assert row.receipt_id in out and "failed_retryable" in out
    stored = MemoryDurableReceipt.objects.get(pk=row.pk)
    assert stored.attempt_count == 1 and stored.next_retry_at_ms is not None

    out, _ = run("repair_once", "--agent", "ops", "--json")
    assert json.loads(out)["processed"] == []


def test_create_api_token_prints_a_working_token_once_and_revokes_it():
    make_user("robot", "operator")
    out, err = run("create_api_token", "--user", "robot", "--name", "ci", "--scope", "operate")
    plaintext = out.strip()
    token = authenticate_token(plaintext)
    assert token is not None and token.scope == "operate" and token.user.username == "robot"
    assert "shown once" in err

    listing, _ = run("create_api_token", "--list")
    assert plaintext not in listing and token.prefix in listing

    run("create_api_token", "--revoke", str(token.pk))
    assert authenticate_token(plaintext) is None


def test_seed_demo_is_idempotent_and_covers_every_status(tmp_path, settings, monkeypatch):
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(tmp_path / "ws")
    settings.OPENSQUILLA_MEMORY_WORKSPACE = None
    settings.VAR_DIR = tmp_path
    monkeypatch.setenv("OPENSQUILLA_DEMO_PASSWORD", "demo-pass-123")
    out, _ = run("seed_demo", "--with-users")
    assert "login: operator / demo-pass-123" in out
    assert "2 'checkpoint_failed ... Not a directory' WARNING lines follow" in out
    statuses = set(MemoryDurableReceipt.objects.values_list("status", flat=True))
    assert {
        "checkpoint_saved",
        "checkpoint_failed",
        "repair_pending",
        "repair_abandoned",
        "repair_failed",
        "preimage_saved",
        "flush_appended",
    } <= statuses
    assert set(MemoryDurableReceipt.objects.values_list("agent_id", flat=True)) == {"main", "ops"}
    failed = MemoryDurableReceipt.objects.filter(status="checkpoint_failed").first()
    assert "Not a directory" in failed.reason
    assert TranscriptEntry.objects.filter(content__contains="<script>alert(1)</script>").exists()
    saved = MemoryDurableReceipt.objects.filter(status="checkpoint_saved").first()
    assert (tmp_path / "ws" / saved.source_path).is_file()

    snapshot = list(MemoryDurableReceipt.objects.order_by("id").values())
    counts = (Session.objects.count(), TranscriptEntry.objects.count())
    out, _ = run("seed_demo", "--with-users")
    assert "0 created" in out and "exists; password unchanged" in out
    assert "WARNING" not in out  # nothing fails on purpose again: nothing is announced
    assert list(MemoryDurableReceipt.objects.order_by("id").values()) == snapshot
    assert (Session.objects.count(), TranscriptEntry.objects.count()) == counts


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ("export_receipts", "--filter", "attempts_min=many"),
            "attempts_min must be a whole number",
        ),
        (("export_receipts", "--filter", "colour=red"), "unknown filter keys: colour"),
        (("export_receipts", "--filter", "status"), "--filter expects KEY=VALUE"),
        (
            ("export_receipts", "--created-from", "last week"),
            "created_from must be epoch milliseconds or an ISO 8601 date",
        ),
        (
            ("export_receipts", "--output", "/nonexistent/dir/x.jsonl"),
            "output directory does not exist",
        ),
        (("requeue", "--dry-run"), "needs a filter or receipt ids"),
        (("requeue", "--plan", "no-such-plan"), "Requeue plan not found: no-such-plan"),
        (("repair_once", "--limit", "0"), "--limit must be at least 1"),
        (
            ("create_api_token", "--user", "ghost", "--name", "x", "--scope", "read"),
            "user 'ghost' does not exist",
        ),
        (("create_api_token", "--revoke", "424242"), "API token not found: 424242"),
        (("create_api_token", "--user", "ghost"), "missing --name, --scope"),
        (("import_opensquilla", "/etc/hostname"), "is not an SQLite database"),
    ],
)
def test_bad_input_is_one_clear_error(args, message):
    with pytest.raises(CommandError) as excinfo:
        run(*args)
    assert message in str(excinfo.value)
    assert "\n" not in str(excinfo.value)


def test_errors_exit_non_zero_with_one_line_and_no_traceback(tmp_path):
    env = {**os.environ, "OPENSQUILLA_VAR_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "manage.py", "export_receipts", "--skip-checks", "--filter", "due=maybe"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == ["CommandError: due must be true or false"]
