"""``import_opensquilla``: bring an OpenSquilla ``sessions.db`` and its workspace in.

Contract:
- All or nothing. Every row is written inside one transaction; a bad source (not SQLite,
  corrupt, not OpenSquilla, an unsafe receipt path, a malformed value) raises
  ``ImportSourceError`` and leaves the database as it was. Files copied before a failure are
  removed again.
- Idempotent. Sessions match on the canonical key, transcript entries on
  (session_id, message_id), receipts on ``idempotency_key``; a second run reports
  everything unchanged and writes nothing.
- Faithful. ``receipt_id``, ``created_at``, ``updated_at`` and the idempotency key are kept.
  Receipts go through the ledger's bulk upsert with ``keep_stamps=True`` rather than the
  single-row upsert, which stamps ``updated_at`` with now (upstream's upsert rule) and records
  one status-change event per row: the import records ONE summary event instead, so the
  audit timeline says "imported from <file>" rather than thousands of synthetic changes.
- The row mapping lives in :mod:`.rows`, shared with the live mirror (``receipts_app.mirror``).
- Under a gateway name (``gateway``, default ``local``): every row lands in that gateway
  (``sessions_app.gateways``), its files in that gateway's roots (:mod:`.targets`), and the
  gateway records where it came from and the OpenSquilla version and schema seen.
- Transcript entries keep their own ids (``TranscriptEntry.gateway_entry_id``), because a
  checkpoint's coverage (``through-<max id>`` and the coverage hash) is computed over them;
  the row's primary key is ours, so two gateways' ids never compete and nothing is renumbered.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from django.db import transaction

from opensquilla_site.timeutil import now_ms
from sessions_app.gateways import (
    DEFAULT_GATEWAY,
    Gateway,
    GatewayNameError,
    ensure_gateway,
    using_gateway,
    validate_gateway_name,
)
from sessions_app.keys import normalize_agent_id

from .. import audit
from . import rows
from .compactions import import_compactions
from .errors import ImportSourceError
from .files import copy_planned, plan_copies, remove_created, sha256_file
from .paths import CHECKPOINT_DIR, RAW_FALLBACK_DIR
from .report import ImportReport
from .rows import FileFacts
from .source import SourceDatabase
from .targets import file_targets

Progress = Callable[[str, int, int], None]


def _noop_progress(stage: str, done: int, total: int) -> None:
    return None


def import_opensquilla(
    *,
    db_path: Path,
    workspace: Path | None,
    target_workspace: Path | None = None,
    memory_workspace: str | None = None,
    progress: Progress | None = None,
    gateway: str = DEFAULT_GATEWAY,
) -> ImportReport:
    """Import every session, transcript entry and receipt, then the workspace files, into
    gateway ``gateway`` (a slug; created when new).

    ``target_workspace`` defaults to ``settings.OPENSQUILLA_CHECKPOINT_WORKSPACE`` (another
    gateway than ``local``: its ``gateways/<name>`` directory). Raw-fallback archives go to
    ``memory_workspace`` (default ``settings.OPENSQUILLA_MEMORY_WORKSPACE``, ``{agent}`` and
    ``{gateway}`` substituted), falling back to the target workspace. Raises
    ``ImportSourceError`` and imports nothing on bad input.
    """
    report_progress = progress or _noop_progress
    db_path = Path(db_path)
    gateway = check_gateway_name(gateway)
    source_workspace = _check_workspace(workspace)
    targets = file_targets(
        gateway, target_workspace=target_workspace, memory_workspace=memory_workspace
    )
    checkpoint_root = _target_root(targets.checkpoint_root, needed=source_workspace is not None)
    template = targets.memory_template

    def memory_root_for(agent: str) -> Path:
        if template:
            return Path(str(template).replace("{agent}", normalize_agent_id(agent))).expanduser()
        assert checkpoint_root is not None
        return checkpoint_root

    report = ImportReport(source=str(db_path), gateway=gateway)
    created_files: list[Path] = []
    with SourceDatabase(db_path) as source, using_gateway(gateway):
        report.coverage_columns_present = source.has_coverage_columns
        _note_schema(source, report)
        totals = {
            "sessions": source.count("sessions"),
            "transcript entries": source.count("transcript_entries"),
            "receipts": source.count("memory_durable_receipts"),
        }
        facts = FileFacts()
        try:
            with transaction.atomic():
                record_gateway_seen(gateway, source)
                _import_sessions(source, report, report_progress, totals["sessions"])
                _import_entries(source, report, report_progress, totals["transcript entries"])
                _import_receipts(source, report, report_progress, totals["receipts"], facts)
                import_compactions(source, report)  # degraded ones are repaired by the repair tick
                if source_workspace is not None and checkpoint_root is not None:
                    _import_files(
                        source_workspace,
                        checkpoint_root,
                        memory_root_for,
                        facts,
                        report,
                        report_progress,
                        created_files,
                    )
                else:
                    report.warn("no_workspace", "no --workspace given: no files were copied")
                if report.changed:
                    _record_summary(report)
        except BaseException:
            remove_created(created_files)
            raise
    return report


def _note_schema(source: SourceDatabase, report: ImportReport) -> None:
    schema = source.schema_version()
    report.source_schema = schema.label()
    if schema.newer_than_known:
        report.warn(
            "newer_schema",
            f"the source schema ({schema.label()}) is newer than this product knows; "
            "only the tables and columns it knows were read",
        )


# --- arguments ----------------------------------------------------------------------------


def _check_workspace(workspace: Path | None) -> Path | None:
    if workspace is None:
        return None
    path = Path(workspace)
    if not path.is_dir():
        raise ImportSourceError(f"workspace {path} is not a directory")
    return path


def check_gateway_name(gateway: str) -> str:
    try:
        return validate_gateway_name(gateway)
    except GatewayNameError as exc:
        raise ImportSourceError(str(exc)) from exc


def record_gateway_seen(gateway: str, source: SourceDatabase) -> None:
    """The gateway (created when new), with where it is read from and what it runs."""
    schema = source.schema_version()  # the one schema reader (importer/schema.py)
    seen = now_ms()
    record = ensure_gateway(
        gateway,
        source=str(Path(source.path).expanduser().resolve()),
        opensquilla_version=schema.release,
        schema_version=schema.label(),
        last_seen_at=seen,
    )
    if schema.ledger_retired and record.ledger_retired_at is None:
        # The first sight of its V044 ledger: its flush and repair pipelines are gone upstream.
        Gateway.objects.filter(name=gateway, ledger_retired_at__isnull=True).update(
            ledger_retired_at=seen
        )


def _target_root(chosen: Path | None, *, needed: bool) -> Path | None:
    if not chosen:
        if needed:
            raise ImportSourceError(
                "no target workspace: set OPENSQUILLA_CHECKPOINT_WORKSPACE or pass "
                "--target-workspace"
            )
        return None
    return Path(chosen).expanduser()


# --- rows ---------------------------------------------------------------------------------


def _import_sessions(
    source: SourceDatabase, report: ImportReport, progress: Progress, total: int
) -> None:
    done = 0
    for batch in source.sessions():
        rows.apply_sessions(batch, report)
        done += len(batch)
        progress("sessions", done, total)


def _import_entries(
    source: SourceDatabase, report: ImportReport, progress: Progress, total: int
) -> None:
    done = 0
    for batch in source.transcript_entries():
        rows.apply_entries(batch, report)
        done += len(batch)
        progress("transcript entries", done, total)


def _import_receipts(
    source: SourceDatabase,
    report: ImportReport,
    progress: Progress,
    total: int,
    facts: FileFacts,
) -> None:
    done = 0
    for batch in source.receipts():
        rows.apply_receipts(batch, report, facts)
        done += len(batch)
        progress("receipts", done, total)


# --- files --------------------------------------------------------------------------------


def _import_files(
    workspace: Path,
    checkpoint_root: Path,
    memory_root_for: Callable[[str], Path],
    facts: FileFacts,
    report: ImportReport,
    progress: Progress,
    created: list[Path],
) -> None:
    for relative, hashes in sorted(facts.expected_hash.items()):
        path = workspace / relative
        if not path.is_file():
            continue
        actual = sha256_file(path)
        if actual not in hashes:
            report.files.hash_mismatches += 1
            report.warn(
                "hash_mismatch",
                f"{relative}: file sha256 {actual[:12]}… differs from its receipt's content_hash",
            )
    for relative in sorted(facts.agents_by_path):
        if relative.startswith((CHECKPOINT_DIR + "/", RAW_FALLBACK_DIR + "/")):
            if not (workspace / relative).is_file():
                report.files.missing += 1
                report.warn(
                    "missing_file", f"{relative} is named by a receipt but not in the workspace"
                )
    plans = plan_copies(
        workspace=workspace,
        checkpoint_root=checkpoint_root,
        memory_root_for=memory_root_for,
        agents_by_path=facts.agents_by_path,
        report=report,
    )
    progress("files", 0, len(plans))
    copy_planned(plans, report, created)
    progress("files", len(plans), len(plans))


def _record_summary(report: ImportReport) -> None:
    audit.record_event(
        receipt_id="",
        action="import",
        reason=f"imported from {report.source}"
        + ("" if report.gateway == DEFAULT_GATEWAY else f" as gateway {report.gateway}"),
        details={
            "source": report.source,
            "gateway": report.gateway,
            "sessions": report.sessions.line(),
            "transcript_entries": report.transcript_entries.line(),
            "receipts": report.receipts.line(),
            "files": report.files.line(),
        },
    )
