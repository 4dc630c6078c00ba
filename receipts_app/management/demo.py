"""Demo data for the console (``manage.py seed_demo``), written through the real services.

Every piece is looked up before it is written, so a second run changes nothing. Receipts
that upstream's code would produce (checkpoints, failed checkpoints) come from
``record_memory_checkpoint`` itself; flush and repair rows, which need an LLM round trip to
arise naturally, are upserted through the ledger with the fields the flush ledger writes.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group, User

from opensquilla_site.roles import ensure_roles
from opensquilla_site.timeutil import now_ms
from sessions_app import services as session_services
from sessions_app.keys import agent_id_for_session_key
from sessions_app.models import Session

from .. import ledger
from ..checkpoint import record_memory_checkpoint
from ..flush.archive import write_raw_fallback_archive
from ..flush_runtime import memory_workspace_for_agent
from ..models import MemoryDurableReceipt
from ..statuses import (
    CHECKPOINT_FAILED,
    CHECKPOINT_SAVED,
    FLUSH_APPENDED,
    PREIMAGE_SAVED,
    REPAIR_ABANDONED,
    REPAIR_FAILED,
    REPAIR_PENDING,
)

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
DEMO_ROLES = ("admin", "operator", "viewer")


@dataclass(frozen=True)
class DemoSession:
    key: str
    messages: tuple[tuple[str, str], ...]
    # Messages appended after the saved checkpoint: the console then shows "not covered".
    later_messages: tuple[tuple[str, str], ...] = ()
    checkpoint_turn: str | None = None
    failed_checkpoint_turn: str | None = None


SESSIONS: tuple[DemoSession, ...] = (
    DemoSession(
        key="agent:main:webchat:demo-alice",
        messages=(
            ("user", "Remind me what we decided about the Paris offsite budget."),
            ("assistant", "You capped it at 12,000 EUR and moved the date to Tuesday 14th."),
            ("user", "Add that the venue needs a deposit by Friday."),
            ("assistant", "Noted: venue deposit due Friday. I'll keep it in memory."),
        ),
        checkpoint_turn="cmp_demo_alice",
    ),
    DemoSession(
        key="agent:main:webchat:demo-markup",
        messages=(
            ("user", "Does the console escape this? <script>alert(1)</script>"),
            ("assistant", "It should show it as text: <img src=x onerror=alert(2)> &amp; all."),
        ),
        later_messages=(("user", "One more message after the checkpoint."),),
        checkpoint_turn="cmp_demo_markup",
    ),
    DemoSession(
        key="agent:ops:discord:group:demo-1",
        messages=(
            ("user", "Rollback of deploy 4812 finished?"),
            ("assistant", "Yes, rolled back at 09:14 UTC; error rate is back to baseline."),
            ("user", "Write the incident summary for the weekly report."),
        ),
        failed_checkpoint_turn="cmp_demo_ops_failed",
    ),
    DemoSession(
        key="agent:main:cron:nightly-demo",
        messages=(
            ("system", "Nightly maintenance run started."),
            ("assistant", "Rotated 3 API keys and pruned 41 stale sessions."),
        ),
        checkpoint_turn="cmp_demo_nightly",
    ),
    DemoSession(
        key="agent:main:telegram:direct:demo-42",
        messages=(
            ("user", "My birthday is on the 3rd of May, please remember it."),
            ("assistant", "Got it, 3 May. I'll remember."),
        ),
        failed_checkpoint_turn="cmp_demo_tg_failed",
    ),
)


@dataclass
class DemoReport:
    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    users: list[tuple[str, str]] = field(default_factory=list)  # (username, password note)
    workspace: str = ""

    def note(self, created: bool, what: str) -> None:
        (self.created if created else self.existing).append(what)


def demo_workspace() -> Path:
    configured = getattr(settings, "OPENSQUILLA_CHECKPOINT_WORKSPACE", None)
    root = Path(configured) if configured else Path(settings.VAR_DIR) / "demo-workspace"
    root.mkdir(parents=True, exist_ok=True)
    return root


def _unwritable_workspace() -> Path:
    """A workspace path under a regular file: mkdir fails with ENOTDIR, as on a broken mount."""
    blocker = Path(settings.VAR_DIR) / "demo-not-a-directory"
    if not blocker.exists():
        blocker.write_text("seed_demo: a file where a directory is expected\n", encoding="utf-8")
    return blocker / "workspace"


def _checkpoint_exists(session: Session, turn_id: str, status: str) -> bool:
    return MemoryDurableReceipt.objects.filter(
        session_key=session.session_key,
        session_id=session.session_id,
        scope="checkpoint",
        turn_id=turn_id,
        status=status,
    ).exists()


def deliberate_failures_due() -> int:
    """How many of the demo's deliberate failed checkpoints the next seed will write (each
    logs one ``checkpoint_failed … Not a directory`` WARNING): none once they exist."""
    return sum(
        1
        for spec in SESSIONS
        if spec.failed_checkpoint_turn
        and not MemoryDurableReceipt.objects.filter(
            session_key=spec.key,
            scope="checkpoint",
            turn_id=spec.failed_checkpoint_turn,
            status=CHECKPOINT_FAILED,
        ).exists()
    )


def _ensure_session(spec: DemoSession, report: DemoReport, workspace: Path) -> Session:
    session = session_services.get_session(spec.key)
    created = session is None
    if session is None:
        session = session_services.create_session(spec.key)
        for role, content in spec.messages:
            session_services.append_message(spec.key, role=role, content=content)
    report.note(created, f"session {spec.key}")
    if spec.checkpoint_turn:
        exists = _checkpoint_exists(session, spec.checkpoint_turn, CHECKPOINT_SAVED)
        if not exists:
            record_memory_checkpoint(
                spec.key, turn_id=spec.checkpoint_turn, source="seed_demo", workspace_dir=workspace
            )
        report.note(not exists, f"checkpoint_saved {spec.key}")
    if spec.failed_checkpoint_turn:
        exists = _checkpoint_exists(session, spec.failed_checkpoint_turn, CHECKPOINT_FAILED)
        if not exists:
            try:
                record_memory_checkpoint(
                    spec.key,
                    turn_id=spec.failed_checkpoint_turn,
                    source="seed_demo",
                    workspace_dir=_unwritable_workspace(),
                )
            except OSError:
                pass  # expected: the failure receipt is the point
        report.note(not exists, f"checkpoint_failed {spec.key}")
    if created and spec.later_messages:
        for role, content in spec.later_messages:
            session_services.append_message(spec.key, role=role, content=content)
    return session_services.get_session(spec.key) or session


def _archive(agent: str, session_key: str, text: str, fallback: Path) -> tuple[str, str]:
    root = memory_workspace_for_agent(agent) or fallback
    written = write_raw_fallback_archive(
        root,
        content=f"# Raw flush (preimage)\n\n{text}",
        reason="preimage",
        session_key=session_key,
    )
    return written.relative_path, written.content_hash


def _ledger_row(key: str, report: DemoReport, build: Callable[[], dict[str, Any]]) -> None:
    if MemoryDurableReceipt.objects.here().filter(idempotency_key=key).exists():
        report.note(False, key)
        return
    ledger.upsert_memory_durable_receipt(MemoryDurableReceipt(idempotency_key=key, **build()))
    report.note(True, key)


def _flush_and_repair_rows(
    sessions: dict[str, Session], report: DemoReport, workspace: Path
) -> None:
    now = now_ms()
    nightly = sessions["agent:main:cron:nightly-demo"]
    alice = sessions["agent:main:webchat:demo-alice"]
    tg = sessions["agent:main:telegram:direct:demo-42"]

    def rows_for(session: Session, turn: str, text: str) -> Callable[[], dict[str, Any]]:
        def build() -> dict[str, Any]:
            agent = agent_id_for_session_key(session.session_key) or "main"
            path, digest = _archive(agent, session.session_key, text, workspace)
            return {"target_path": path, "content_hash": digest}

        return build

    specs: list[tuple[str, Session, str, dict[str, Any], str]] = [
        # (status, session, turn, extra fields, archive text)
        (
            PREIMAGE_SAVED,
            nightly,
            "flush:1-2",
            {
                "scope": "preimage",
                "reason": "preimage",
                "attempt_count": 1,
                "created_at": now - 6 * DAY_MS,
            },
            "system: Nightly maintenance run started.",
        ),
        (
            REPAIR_PENDING,
            nightly,
            "flush:1-2",
            {
                "scope": "repair",
                "reason": "provider_failed_archived",
                "attempt_count": 1,
                "created_at": now - 5 * DAY_MS,
            },
            "system: Nightly maintenance run started.",
        ),
        (
            REPAIR_ABANDONED,
            tg,
            "flush:1-2",
            {
                "scope": "repair",
                "reason": "empty_raw_excerpt",
                "attempt_count": 4,
                "created_at": now - 3 * DAY_MS,
            },
            "user: (empty excerpt)",
        ),
        (
            REPAIR_FAILED,
            alice,
            "flush:1-4",
            {
                "scope": "repair",
                "reason": "archive_failed",
                "attempt_count": 1,
                "created_at": now - 2 * DAY_MS,
            },
            "user: Remind me what we decided.",
        ),
        (
            REPAIR_PENDING,
            tg,
            "flush:3-4",
            {
                "scope": "repair",
                "reason": "OSError",
                "attempt_count": 2,
                "next_retry_at_ms": now + 6 * HOUR_MS,
                "created_at": now - DAY_MS,
            },
            "user: My birthday is on the 3rd of May.",
        ),
    ]
    for status, session, turn, extra, text in specs:
        key = f"demo:{extra['scope']}:{session.session_key}:{turn}:{status}"
        archive = rows_for(session, turn, text)

        def build(session=session, turn=turn, status=status, extra=extra, archive=archive):
            return {
                "session_key": session.session_key,
                "session_id": session.session_id,
                "turn_id": turn,
                "source_path": f"session:{session.session_key}:{turn}",
                "status": status,
                **archive(),
                **extra,
            }

        _ledger_row(key, report, build)
    # A successful LLM flush into a memory note (no file needed: the console only links it).
    _ledger_row(
        f"demo:flush:{alice.session_key}:flush:1-4:flush_appended",
        report,
        lambda: {
            "session_key": alice.session_key,
            "session_id": alice.session_id,
            "turn_id": "flush:1-4",
            "scope": "flush",
            "status": FLUSH_APPENDED,
            "reason": "ok",
            "source_path": f"session:{alice.session_key}:flush:1-4",
            "target_path": "memory/2026-05-01-paris-offsite.md",
            "content_hash": "0" * 64,
            "attempt_count": 1,
            "created_at": now - 4 * DAY_MS,
        },
    )


def ensure_demo_users(report: DemoReport) -> None:
    shared = os.environ.get("OPENSQUILLA_DEMO_PASSWORD")
    for role in DEMO_ROLES:
        user = User.objects.filter(username=role).first()
        if user is not None:
            report.users.append((role, "exists; password unchanged"))
            continue
        password = shared or secrets.token_urlsafe(9)
        user = User.objects.create_user(username=role, password=password)
        ensure_roles()
        user.groups.add(Group.objects.get(name=role))
        if role == "admin":
            user.is_staff = True
            user.is_superuser = True
            user.save(update_fields=["is_staff", "is_superuser"])
        report.users.append((role, password))


def seed_demo(*, with_users: bool = False) -> DemoReport:
    workspace = demo_workspace()
    report = DemoReport(workspace=str(workspace))
    sessions = {spec.key: _ensure_session(spec, report, workspace) for spec in SESSIONS}
    _flush_and_repair_rows(sessions, report, workspace)
    if with_users:
        ensure_demo_users(report)
    return report
