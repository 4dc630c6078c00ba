"""The repair worker: re-distil raw-fallback archives into memory (docs/UPSTREAM.md#repair).

One tick: return stale claims to the queue, import unreferenced archives as legacy rows,
then claim due rows one at a time, run the flush over the archive, and record the outcome
(``repair_done``, or ``repair_pending`` with backoff, or ``repair_abandoned`` after the
fourth failure). Every status change goes through the ledger, which writes the audit
event with the current actor; the worker runs as ``audit.WORKER``.

Deliberate differences from upstream (see docs/WORKERS.md):
- any exception between claim and outcome is recorded as a failed attempt, so a row is
  never left ``repair_running`` by a bug (upstream leaves it for stale recovery);
- a repair flush that degrades points at the source archive instead of writing a second
  copy, so repairs never mint new "legacy" archives;
- rows whose path is not a plain ``memory/.raw_fallbacks/*.md`` file are skipped unclaimed.
"""

from __future__ import annotations

import contextvars
import glob
import hashlib
import json
import logging
import os
import re
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import transaction
from django.db.models import Q

from opensquilla_site.timeutil import now_ms as wall_clock_ms
from sessions_app.compactions import CompactionSource
from sessions_app.gateways import (
    DEFAULT_GATEWAY,
    Gateway,
    MisroutedWork,
    check_served,
    gateway_queue,
    live_queue_consumers,
    repairs_handed_over,
    repairs_here_q,
    served_gateway,
    using_gateway,
)
from sessions_app.keys import DEFAULT_AGENT_ID, agent_prefix, normalize_agent_id
from sessions_app.models import Session

from . import audit, enqueue, ledger
from .flush import (
    SessionFlushService,
    flush_receipt_allows_destructive_compaction,
    parse_raw_fallback_entries,
)
from .flush.archive import raw_fallback_header_reason
from .flush.correlation import ProviderRequestCorrelation
from .flush_runtime import (
    build_flush_service,
    flush_request_correlation,
    memory_workspace_for_agent,
    memory_workspace_template,
)
from .models import MemoryDurableReceipt
from .retired import retired_q
from .statuses import (
    REPAIR_ABANDONED,
    REPAIR_DONE,
    REPAIR_PENDING,
    REPAIR_QUEUE_STATUSES,
    REPAIR_RUNNING,
)

logger = logging.getLogger(__name__)

RAW_FALLBACK_DIR = "memory/.raw_fallbacks"
RAW_FALLBACK_PREFIX = RAW_FALLBACK_DIR + "/"
REPAIR_RECEIPTS_DIRNAME = ".repair_receipts"
# Failed attempt n waits BACKOFF_MS[n]; the MAX_REPAIR_ATTEMPTS-th failure abandons the row.
BACKOFF_MS: dict[int, int] = {1: 300_000, 2: 1_800_000, 3: 21_600_000}
MAX_REPAIR_ATTEMPTS = 4
STALE_CLAIM_MS = 30 * 60 * 1000
STALE_RETRY_DELAY_MS = BACKOFF_MS[1]
DEFAULT_SCAN_LIMIT = 200


# --- attempt accounting (2.4) ---------------------------------------------------------------


def next_attempt_number(attempt_source: MemoryDurableReceipt) -> int:
    """The number of the attempt that just failed, counted from the row as read before claim.

    A flush-created row (attempt_count 1, pending, never retried) has not been repaired yet:
    the flush itself is not a repair attempt, so its first failure is attempt 1.
    """
    previous = int(attempt_source.attempt_count or 0)
    if (
        previous == 1
        and attempt_source.status == REPAIR_PENDING
        and attempt_source.next_retry_at_ms is None
    ):
        return 1
    return previous + 1


def mark_repair_attempt_failed(
    claimed: MemoryDurableReceipt,
    reason: str | None,
    now_ms: int,
    attempt_source: MemoryDurableReceipt | None = None,
) -> MemoryDurableReceipt:
    """Back off (5 min, 30 min, 6 h) or abandon on the fourth failure; returns the row."""
    attempt = next_attempt_number(attempt_source or claimed)
    reason = reason or "repair_failed"
    if attempt >= MAX_REPAIR_ATTEMPTS:
        return ledger.update_memory_durable_receipt(
            claimed.receipt_id,
            status=REPAIR_ABANDONED,
            reason=reason,
            attempt_count=attempt,
            next_retry_at_ms=None,
        )
    return ledger.update_memory_durable_receipt(
        claimed.receipt_id,
        status=REPAIR_PENDING,
        reason=reason,
        attempt_count=attempt,
        next_retry_at_ms=now_ms + BACKOFF_MS[attempt],
    )


def mark_repair_attempt_done(claimed: MemoryDurableReceipt) -> MemoryDurableReceipt:
    # reason and attempt_count stay as they were, as upstream: they tell how it got here.
    return ledger.update_memory_durable_receipt(
        claimed.receipt_id, status=REPAIR_DONE, next_retry_at_ms=None
    )


def recover_stale_repair_claims(now_ms: int | None = None) -> int:
    """Return claims untouched for 30 minutes to the queue (due again in 5 minutes), of the
    gateways whose repairs are this console's: a ``repair_running`` row of any other gateway
    is the gateway's own repair at work, which is not ours to reset."""
    now = wall_clock_ms() if now_ms is None else now_ms
    return ledger.recover_stale_memory_repair_claims(
        gateways=Gateway.objects.filter(repairs_here_q()).values_list("name", flat=True),
        running_status=REPAIR_RUNNING,
        pending_status=REPAIR_PENDING,
        stale_before_ms=now - STALE_CLAIM_MS,
        next_retry_at_ms=now + STALE_RETRY_DELAY_MS,
        updated_at_ms=now,
        reason="stale_repair_claim",
    )


# --- paths and sidecars ---------------------------------------------------------------------


def repair_receipt_path(row: Any) -> str | None:
    """A raw-fallback source or target path wins; else any source path, then target path."""
    source = getattr(row, "source_path", None)
    target = getattr(row, "target_path", None)
    for path in (source, target):
        if isinstance(path, str) and path.startswith(RAW_FALLBACK_PREFIX):
            return path
    if isinstance(source, str) and source:
        return source
    if isinstance(target, str) and target:
        return target
    return None


def raw_fallback_rel_path(path: str) -> str:
    """Validate a ``memory/.raw_fallbacks/<name>.md`` path (a bare name is accepted).

    Raises ``ValueError`` for anything else: nested paths, ``..``, hidden files, absolute
    paths, other suffixes. The worker never opens a file it did not validate here.
    """
    pure = PurePosixPath(path)
    if pure.is_absolute() or "\\" in path or "\x00" in path:
        raise ValueError("path must be memory/.raw_fallbacks/*.md")
    if len(pure.parts) == 1:
        pure = PurePosixPath(RAW_FALLBACK_DIR) / pure
    if (
        len(pure.parts) != 3
        or pure.parts[:2] != ("memory", ".raw_fallbacks")
        or pure.name.startswith(".")
        or pure.suffix != ".md"
    ):
        raise ValueError("path must be memory/.raw_fallbacks/*.md")
    return pure.as_posix()


def sidecar_path(raw_path: Path) -> Path:
    return raw_path.parent / REPAIR_RECEIPTS_DIRNAME / f"{raw_path.name}.json"


def read_sidecar_status(raw_path: Path) -> str:
    try:
        payload = json.loads(sidecar_path(raw_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "pending"
    if not isinstance(payload, Mapping):
        return "pending"
    return str(payload.get("status") or "pending")


def write_sidecar(
    raw_path: Path, *, status: str, reason: str | None = None, receipt: Any = None
) -> None:
    """``{status, reason, updatedAt, receipt}`` beside the archive, replaced atomically."""
    target = sidecar_path(raw_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "status": status,
        "reason": reason,
        "updatedAt": wall_clock_ms(),
        "receipt": receipt.to_dict() if receipt is not None else None,
    }
    body = json.dumps(payload, ensure_ascii=False, indent=2, default=str)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(body)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def repair_receipt_to_wire(row: MemoryDurableReceipt) -> dict[str, Any]:
    """The row as upstream's ``memory.repair.*`` RPCs describe it (camelCase)."""
    path = repair_receipt_path(row)
    return {
        "sourceType": "raw_fallback"
        if isinstance(path, str) and path.startswith(RAW_FALLBACK_PREFIX)
        else "durable_receipt",
        "receiptId": row.receipt_id,
        "sessionId": row.session_id,
        "sessionKey": row.session_key,
        "turnId": row.turn_id,
        "scope": row.scope,
        "path": path,
        "sourcePath": row.source_path,
        "targetPath": row.target_path,
        "contentHash": row.content_hash,
        "repairStatus": row.status,
        "reason": row.reason,
        "attemptCount": row.attempt_count,
        "nextRetryAtMs": row.next_retry_at_ms,
        "createdAt": row.created_at,
        "updatedAt": row.updated_at,
    }


# --- the repair flush -----------------------------------------------------------------------

# The archive being repaired, so a degraded repair flush can point at it (see below).
_source_archive: contextvars.ContextVar[tuple[str, str, int] | None] = contextvars.ContextVar(
    "opensquilla_repair_source_archive", default=None
)


def reuse_source_archive(workspace: Path, **kwargs: Any) -> dict[str, Any]:
    """Archive writer for repair flushes: the transcript is already archived in the source.

    Upstream writes a fresh ``raw-fallback-<hash>`` copy when a repair flush degrades, and a
    later tick imports that unreferenced copy as a new legacy row. Pointing at the source
    keeps one archive per transcript and one row per piece of work.
    """
    source = _source_archive.get()
    if source is None:
        from .flush import write_raw_fallback_archive

        result = write_raw_fallback_archive(workspace, **kwargs)
        return {"relative_path": result.relative_path, "content_hash": result.content_hash}
    path, digest, size = source
    return {"relative_path": path, "content_hash": digest, "byte_count": size}


def maintenance_turn_id() -> str:
    """The turn id of a repair flush (upstream 0.5: ``maintenance_<hex>``, docs/UPSTREAM.md)."""
    return f"maintenance_{uuid.uuid4().hex}"


def correlatable_session_id(source: Any) -> str | None:
    """The real session id of a repair source; None for the legacy raw namespace.

    A legacy row's ``legacy-raw:…`` id names no session a provider bill could be matched
    to, so such repairs send no correlation (upstream's ``_correlatable_repair_session_id``).
    """
    session_id = getattr(source, "session_id", None)
    session_key = getattr(source, "session_key", None)
    if not isinstance(session_id, str) or not session_id or session_id.startswith("legacy-raw:"):
        return None
    if isinstance(session_key, str) and ":memory-repair:legacy-raw" in session_key:
        return None
    return session_id


def repair_correlation(source: Any) -> tuple[str, ProviderRequestCorrelation | None]:
    """A repair flush's maintenance turn id and the correlation it sends, if any."""
    turn_id = maintenance_turn_id()
    return turn_id, flush_request_correlation(correlatable_session_id(source), turn_id)


def _correlation_kwargs(correlation: ProviderRequestCorrelation | None) -> dict[str, Any]:
    # Left out rather than passed as None: upstream's flush-service protocol does the same.
    return {} if correlation is None else {"provider_request_correlation": correlation}


def build_repair_flush_service() -> SessionFlushService:
    return build_flush_service(archive_writer=reuse_source_archive)


def repair_raw_fallback_source(
    root: Path,
    path: str,
    *,
    flush_service: SessionFlushService,
    agent_id: str,
    turn_id: str | None = None,
    correlation: ProviderRequestCorrelation | None = None,
) -> dict[str, Any]:
    """Flush one archive again; ``status`` is ``repaired`` or ``failed_retryable``.

    ``repaired`` requires a strictly safe LLM write (docs/UPSTREAM.md#flush-outcomes-and-ledger-rows): a no-op or a degraded
    flush counts as a failure, so an archive with nothing memorable is retried until it is
    abandoned, as upstream.
    """
    rel = raw_fallback_rel_path(path)
    raw_path = (root / rel).resolve()
    raw_root = (root / RAW_FALLBACK_DIR).resolve()
    if raw_path.parent != raw_root:
        # A symlinked archive directory must not let the worker read outside the workspace.
        raise ValueError("path must be memory/.raw_fallbacks/*.md")
    try:
        data = raw_path.read_bytes()
    except OSError as exc:
        return {"status": "failed_retryable", "reason": type(exc).__name__}
    content = data.decode("utf-8", errors="replace")
    entries = parse_raw_fallback_entries(content)
    if not entries:
        write_sidecar(raw_path, status="failed_retryable", reason="empty_raw_excerpt")
        return {"status": "failed_retryable", "reason": "empty_raw_excerpt"}
    digest = hashlib.sha256(content.encode("utf-8")).hexdigest()
    token = _source_archive.set((rel, hashlib.sha256(data).hexdigest(), len(data)))
    try:
        # agent_id by keyword: upstream's flush-service protocol (any execute(transcript,
        # session_key, **kwargs) works).
        receipt = async_to_sync(flush_service.execute)(
            entries,
            f"raw-fallback:{digest[:16]}",
            agent_id=agent_id,
            message_window=0,
            segment_mode="auto",
            raw_capture_policy="off",
            turn_id=turn_id or maintenance_turn_id(),
            **_correlation_kwargs(correlation),
        )
    except Exception as exc:
        logger.warning("memory_repair.flush_failed path=%s: %s", rel, exc)
        write_sidecar(raw_path, status="failed_retryable", reason=type(exc).__name__)
        return {"status": "failed_retryable", "reason": type(exc).__name__}
    finally:
        _source_archive.reset(token)
    repaired = flush_receipt_allows_destructive_compaction(receipt)
    status = "repaired" if repaired else "failed_retryable"
    write_sidecar(raw_path, status=status, receipt=receipt)
    return {"status": status, "receipt": receipt.to_dict()}


def repair_durable_receipt_source(
    row: MemoryDurableReceipt,
    *,
    memory_root: Path,
    flush_service: SessionFlushService,
    now_ms: int | None = None,
    agent_id: str | None = None,
) -> dict[str, Any]:
    """Claim ``row``, repair its archive and record the outcome; returns the wire result.

    Unsupported sources are reported ``skipped`` without a claim; a row another worker
    claimed first comes back ``skipped``/``repair_already_claimed`` untouched.
    """
    now = wall_clock_ms() if now_ms is None else now_ms
    base = repair_receipt_to_wire(row)
    path = repair_receipt_path(row)
    try:
        if path is None or not path.startswith(RAW_FALLBACK_PREFIX):
            raise ValueError(path)
        path = raw_fallback_rel_path(path)
    except ValueError:
        return {**base, "status": "skipped", "reason": "unsupported_repair_source"}
    claimed = ledger.claim_memory_repair_receipt(
        row.receipt_id,
        eligible_statuses=REPAIR_QUEUE_STATUSES,
        claimed_status=REPAIR_RUNNING,
        now_ms=now,
    )
    if claimed is None:
        return {**base, "status": "skipped", "reason": "repair_already_claimed"}
    agent = normalize_agent_id(agent_id or row.agent_id or "main")
    turn_id, correlation = repair_correlation(row)
    try:
        result = repair_raw_fallback_source(
            memory_root,
            path,
            flush_service=flush_service,
            agent_id=agent,
            turn_id=turn_id,
            correlation=correlation,
        )
    except Exception as exc:
        # Never leave our own claim behind: a failed attempt is recorded and backs off.
        logger.exception("memory_repair.attempt_crashed receipt=%s", row.receipt_id)
        result = {"status": "failed_retryable", "reason": type(exc).__name__}
    if result.get("status") == "repaired":
        final = mark_repair_attempt_done(claimed)
    else:
        final = mark_repair_attempt_failed(
            claimed, str(result.get("reason") or "repair_failed"), now, attempt_source=row
        )
    if final.status in (REPAIR_DONE, REPAIR_ABANDONED):
        # A requeued repair's final outcome closes its requeue (and so its plan's count).
        audit.record_requeue_complete(
            receipt_id=final.receipt_id,
            session_key=final.session_key,
            from_status=REPAIR_RUNNING,
            to_status=final.status,
            outcome="recovered" if final.status == REPAIR_DONE else "failed",
            reason=final.reason if final.status == REPAIR_ABANDONED else None,
            only_if_requeued=True,
        )
    return {
        **base,
        **result,
        "path": path,
        "repairStatus": final.status,
        "attemptCount": final.attempt_count,
        "nextRetryAtMs": final.next_retry_at_ms,
    }


# --- legacy import (8.4) --------------------------------------------------------------------


LEGACY_SESSION_SUFFIX = ":memory-repair:legacy-raw"


def legacy_session_key(agent_id: str) -> str:
    return f"agent:{agent_id}{LEGACY_SESSION_SUFFIX}"


def shared_memory_workspace() -> bool:
    """True when every agent resolves to one memory workspace (no ``{agent}`` in it)."""
    template = memory_workspace_template()
    return bool(template) and "{agent}" not in str(template)


_ARCHIVE_DATE = re.compile(r"\d{4}-\d{2}-\d{2}-")


def archive_owner(file_name: str, agents: Iterable[str]) -> str:
    """The agent a raw-fallback archive in a shared workspace belongs to, read from its name.

    Upstream names an archive ``<date>-<safe96(session_key)>-<reason>-<sha16>.md`` and its
    header ``# Raw flush (<reason>)`` names only the reason, so the name is what says whose
    transcript it holds: ``agent:ops:webchat:s1`` becomes ``agent-ops-webchat-s1`` (and a
    subagent's ``subagent-agent-ops-…``). Agent ids may contain ``-``, so the longest of
    ``agents`` that the name continues with wins; a name that names none (``unknown``, an
    agent this database has never seen) belongs to ``main``, upstream's default agent.
    """
    rest = _ARCHIVE_DATE.sub("", file_name, count=1)
    if rest.startswith("subagent-"):
        rest = rest[len("subagent-") :]
    owner, best = DEFAULT_AGENT_ID, -1
    for agent in agents:
        if rest.startswith(f"agent-{agent}-") and len(agent) > best:
            owner, best = agent, len(agent)
    return owner


def import_legacy_raw_fallback_receipts(
    agent_id: str, memory_root: Path | None, *, agents: Iterable[str] | None = None
) -> int:
    """Queue every archive no receipt refers to; returns how many rows were written.

    Skips archives whose sidecar says ``repaired`` and archives a row already references:
    under the agent's prefix in a per-agent workspace (upstream's rule), under any agent in
    a shared one, where an archive is also imported only by the agent it belongs to
    (:func:`archive_owner`, among ``agents``, by default the tick's agents), so it is queued
    once and not once per agent (docs/WORKERS.md). Idempotent: the key is
    ``repair-legacy-raw:<agent>:<path>``.
    """
    if memory_root is None:
        return 0
    agent = normalize_agent_id(agent_id)
    raw_root = Path(memory_root) / RAW_FALLBACK_DIR
    if not raw_root.is_dir():
        return 0
    shared = shared_memory_workspace()
    known: list[str] = []
    if shared:
        known = sorted({agent, *(repair_agent_ids() if agents is None else agents)})
    prefix = None if shared else agent_prefix(agent)
    imported = 0
    for file_path in sorted(p for p in raw_root.glob("*.md") if p.is_file()):
        if file_path.name.startswith("."):
            continue
        if shared and archive_owner(file_path.name, known) != agent:
            continue
        rel = f"{RAW_FALLBACK_DIR}/{file_path.name}"
        if read_sidecar_status(file_path) == "repaired":
            continue
        if _archive_referenced(rel, session_key_prefix=prefix):
            continue
        try:
            stat = file_path.stat()
            with file_path.open("rb") as handle:
                header = handle.read(512).decode("utf-8", errors="replace")
        except OSError:
            continue
        ledger.upsert_memory_durable_receipt(
            MemoryDurableReceipt(
                session_key=legacy_session_key(agent),
                session_id=f"legacy-raw:{agent}",
                scope="repair",
                source_path=rel,
                idempotency_key=f"repair-legacy-raw:{agent}:{rel}",
                status=REPAIR_PENDING,
                reason=raw_fallback_header_reason(header) or "legacy_raw_fallback",
                attempt_count=0,
                created_at=int(stat.st_mtime * 1000),
            )
        )
        imported += 1
    return imported


def _archive_referenced(path: str, *, session_key_prefix: str | None) -> bool:
    """A row of the current gateway names the archive, other than one its upgrade to 0.5.5+
    retired (upstream's pipeline that would have distilled it is gone, so a handed-over
    gateway's archive is imported as a legacy row of ours instead)."""
    qs = (
        MemoryDurableReceipt.objects.here()
        .filter(Q(source_path=path) | Q(target_path=path))
        .exclude(retired_q())
    )
    if session_key_prefix:
        return ledger.literal_prefix(qs, "session_key", session_key_prefix).exists()
    return qs.exists()


# Duplicates in these statuses are left: one is being repaired right now (the next run takes
# it), the other records memory a repair did write.
_KEEP_DUPLICATE_STATUSES = (REPAIR_RUNNING, REPAIR_DONE)


def duplicate_legacy_repairs() -> list[MemoryDurableReceipt]:
    """Legacy-raw rows that repeat another row's archive in a shared memory workspace.

    Before the owner rule above, every agent imported every unreferenced archive of the
    shared workspace. Of the rows referring to one archive, the one kept is the flush's own
    (any row that is not a legacy import), else the legacy row of the agent the archive
    belongs to, else the oldest; the others are duplicates. In per-agent workspaces equal
    paths are different files, so nothing is a duplicate there; nor are equal paths of two
    gateways (each gateway's workspace is on its own host).
    """
    if not shared_memory_workspace():
        return []
    legacy = MemoryDurableReceipt.objects.filter(
        session_key__endswith=LEGACY_SESSION_SUFFIX,
        idempotency_key__startswith="repair-legacy-raw:",
        source_path__startswith=RAW_FALLBACK_PREFIX,
    )
    paths = sorted({p for p in legacy.values_list("source_path", flat=True) if p})
    duplicates: list[MemoryDurableReceipt] = []
    for start in range(0, len(paths), 500):
        chunk = paths[start : start + 500]
        by_path: dict[tuple[str, str], list[MemoryDurableReceipt]] = {}
        for row in MemoryDurableReceipt.objects.filter(
            Q(source_path__in=chunk) | Q(target_path__in=chunk)
        ).order_by("id"):
            for path in {row.source_path, row.target_path} & set(chunk):
                if path:
                    by_path.setdefault((str(row.gateway_id), path), []).append(row)
        for (_gateway, path), rows in by_path.items():
            legacy_rows = [r for r in rows if _is_legacy_row(r)]
            if len(rows) < 2 or not legacy_rows:
                continue
            if len(legacy_rows) < len(rows):
                keep = None  # the flush's own row owns the archive
            else:
                owner = archive_owner(
                    PurePosixPath(path).name, sorted({r.agent_id for r in legacy_rows})
                )
                keep = next((r for r in legacy_rows if r.agent_id == owner), legacy_rows[0])
            duplicates += [
                r for r in legacy_rows if r is not keep and r.status not in _KEEP_DUPLICATE_STATUSES
            ]
    return sorted(duplicates, key=lambda r: r.pk)


def _is_legacy_row(row: MemoryDurableReceipt) -> bool:
    return row.session_key.endswith(LEGACY_SESSION_SUFFIX) and row.idempotency_key.startswith(
        "repair-legacy-raw:"
    )


def remove_duplicate_legacy_repairs(*, actor: audit.Actor) -> list[str]:
    """Delete :func:`duplicate_legacy_repairs`, one ``duplicate_removed`` event each; returns
    the receipt ids removed."""
    removed: list[str] = []
    with transaction.atomic():
        for row in duplicate_legacy_repairs():
            # Re-checked under the delete: a row claimed meanwhile is kept for the next run.
            deleted, _ = (
                MemoryDurableReceipt.objects.filter(pk=row.pk)
                .exclude(status__in=_KEEP_DUPLICATE_STATUSES)
                .delete()
            )
            if not deleted:
                continue
            audit.record_event(
                receipt_id=row.receipt_id,
                session_key=row.session_key,
                action="duplicate_removed",
                from_status=row.status,
                reason="legacy raw-fallback import repeated under another agent",
                details={"path": row.source_path, "agent_id": row.agent_id},
                actor=actor,
                gateway=row.gateway_id,
            )
            removed.append(row.receipt_id)
    return removed


# --- compaction summaries (upstream's summary branches) ------------------------------------

# A run with any of these params repairs only the selected summaries (upstream's branch 1).
COMPACTION_SELECTORS = ("summaryId", "sessionKey", "compactionId")
# The tick's scan takes summaries no repair has tried yet; failed ones are retried on request.
TICK_COMPACTION_STATUSES = frozenset({"degraded_forensic"})


def compaction_source() -> Any:
    """Where degraded compaction summaries come from (a seam: upstream's session manager)."""
    return CompactionSource()


def summary_to_wire(summary: Any) -> dict[str, Any]:
    return {
        "sourceType": "compaction_preimage",
        "summaryId": getattr(summary, "id", None),
        "sessionId": getattr(summary, "session_id", None),
        "sessionKey": getattr(summary, "session_key", None),
        "compactionId": getattr(summary, "compaction_id", None),
        "triggerReason": getattr(summary, "trigger_reason", None),
        "flushReceiptStatus": getattr(summary, "flush_receipt_status", "unknown"),
        "removedCount": getattr(summary, "removed_count", None),
        "coveredThroughId": getattr(summary, "covered_through_id", None),
        "createdAt": getattr(summary, "created_at", None),
    }


def preimage_metadata(entries: list[Any]) -> dict[str, Any]:
    """Which entries the repair read: the id range and a hash over id, message id, role, text."""
    digest = hashlib.sha256()
    ids: list[int] = []
    for entry in entries:
        entry_id = getattr(entry, "id", None)
        try:
            if entry_id is not None:
                ids.append(int(entry_id))
        except (TypeError, ValueError):
            pass
        material = "\n".join(
            (
                str(entry_id or ""),
                str(getattr(entry, "message_id", "") or ""),
                str(getattr(entry, "role", "") or ""),
                str(getattr(entry, "content", "") or ""),
            )
        )
        digest.update(material.encode("utf-8", errors="replace"))
        digest.update(b"\n---\n")
    return {
        "entryIdRange": [min(ids), max(ids)] if ids else None,
        "preimageHash": digest.hexdigest() if entries else None,
        "rangePolicy": "archived_full_removed_entries",
    }


def summary_matches(summary: Any, params: Mapping[str, Any]) -> bool:
    for param, attribute in (
        ("summaryId", "id"),
        ("sessionKey", "session_key"),
        ("compactionId", "compaction_id"),
    ):
        wanted = params.get(param)
        if wanted is not None and str(getattr(summary, attribute, "")) != str(wanted):
            return False
    return True


def list_compaction_repair_sources(
    source: Any,
    *,
    agent_id: str,
    params: Mapping[str, Any],
    limit: int,
    scan_limit: int,
) -> list[Any]:
    """Degraded summaries to repair: the selected ones, or (tick) those never repaired."""
    selected = any(key in params for key in COMPACTION_SELECTORS)
    rows = source.list_degraded_compactions(
        agent_id=agent_id, limit=scan_limit if selected else limit
    )
    if selected:
        rows = [row for row in rows if summary_matches(row, params)]
    else:
        rows = [
            row
            for row in rows
            if getattr(row, "flush_receipt_status", None) in TICK_COMPACTION_STATUSES
        ]
    return list(rows)[:limit]


def repair_compaction_source(
    summary: Any, *, source: Any, flush_service: Any, agent_id: str
) -> dict[str, Any]:
    """Flush a compaction's pre-image again and record ``repaired`` / ``failed_retryable``.

    The outcome is written on the summary's ``flush_receipt_status``, as upstream. Like the
    raw-fallback branch, ``repaired`` needs a strictly safe LLM write.
    """
    base = summary_to_wire(summary)
    entries = list(source.get_compaction_preimage(summary))
    metadata = preimage_metadata(entries)
    if not entries:
        source.mark_compaction_repair_status(summary, "failed_retryable")
        return {**base, **metadata, "status": "failed_retryable", "reason": "missing_preimage"}
    turn_id, correlation = repair_correlation(summary)
    try:
        receipt = async_to_sync(flush_service.execute)(
            entries,
            str(getattr(summary, "session_key", "")),
            agent_id=agent_id,
            message_window=0,
            segment_mode="auto",
            raw_capture_policy="off",
            turn_id=turn_id,
            **_correlation_kwargs(correlation),
        )
    except Exception as exc:
        logger.warning("memory_repair.compaction_flush_failed summary=%s: %s", base, exc)
        source.mark_compaction_repair_status(summary, "failed_retryable")
        return {**base, **metadata, "status": "failed_retryable", "reason": type(exc).__name__}
    status = (
        "repaired" if flush_receipt_allows_destructive_compaction(receipt) else "failed_retryable"
    )
    source.mark_compaction_repair_status(summary, status)
    return {**base, **metadata, "status": status, "receipt": receipt.to_dict()}


def _repair_compactions(
    agent: str,
    *,
    params: Mapping[str, Any],
    limit: int,
    scan_limit: int,
    flush_service: Any,
) -> list[dict[str, Any]]:
    source = compaction_source()
    summaries = list_compaction_repair_sources(
        source, agent_id=agent, params=params, limit=limit, scan_limit=scan_limit
    )
    results: list[dict[str, Any]] = []
    for summary in summaries:
        if flush_service is None:
            flush_service = build_repair_flush_service()
        # The flush writes the receipts of the summary's own gateway.
        with using_gateway(getattr(summary, "gateway_id", None)):
            results.append(
                repair_compaction_source(
                    summary, source=source, flush_service=flush_service, agent_id=agent
                )
            )
    return results


# --- ticks ----------------------------------------------------------------------------------


def run_memory_repair_once(
    agent_id: str,
    *,
    limit: int,
    scan_limit: int = DEFAULT_SCAN_LIMIT,
    now_ms: int | None = None,
    path: str | None = None,
    flush_service: SessionFlushService | None = None,
    recover_stale: bool = True,
    import_legacy: bool = True,
    params: Mapping[str, Any] | None = None,
    known_agents: Iterable[str] | None = None,
) -> list[dict[str, Any]]:
    """One agent's pass: degraded compaction summaries, then the due queue (``limit`` in all).

    ``params`` with ``summaryId``, ``sessionKey`` or ``compactionId`` repairs only the
    matching degraded summaries and nothing else (upstream's selector). ``path`` (validated
    as ``memory/.raw_fallbacks/*.md``; ``ValueError`` otherwise) limits the pass to rows of
    that archive and skips summaries. Rows another worker claimed first are left out.
    ``known_agents``: the agents an archive of a shared workspace may belong to (default: the
    tick's agents, :func:`repair_agent_ids`).
    """
    agent = normalize_agent_id(agent_id)
    params = params or {}
    selected_path = raw_fallback_rel_path(path) if path is not None else None
    root = memory_workspace_for_agent(agent)
    # This process's memory workspace is its own gateway's: only that gateway's rows,
    # summaries and archives are repaired here (``manage.py repair_once`` included).
    with audit.acting_as(audit.WORKER), using_gateway(served_gateway()):
        if any(key in params for key in COMPACTION_SELECTORS):
            return _repair_compactions(
                agent,
                params=params,
                limit=limit,
                scan_limit=scan_limit,
                flush_service=flush_service,
            )
        summary_results: list[dict[str, Any]] = []
        if selected_path is None and limit > 0:
            summary_results = _repair_compactions(
                agent,
                params=params,
                limit=limit,
                scan_limit=scan_limit,
                flush_service=flush_service,
            )
            limit -= len(summary_results)
        # Archives become rows of ours only where this console repairs (docs/MIRROR.md,
        # "Nothing done to a gateway unasked"): elsewhere the gateway's own loop imports them.
        if import_legacy and root is not None and repairs_handed_over(served_gateway()):
            import_legacy_raw_fallback_receipts(agent, root, agents=known_agents)
        if recover_stale:
            recover_stale_repair_claims(now_ms)
        now = wall_clock_ms() if now_ms is None else now_ms
        if limit <= 0:
            return summary_results
        rows = ledger.list_memory_repair_receipts(
            statuses=REPAIR_QUEUE_STATUSES,
            limit=scan_limit,
            due_before_ms=now,
            path=selected_path,
            session_key_prefix=agent_prefix(agent),
        )
        service = flush_service
        results: list[dict[str, Any]] = []
        for row in rows:
            if len(results) >= limit:
                break
            if root is None:
                results.append(
                    {
                        **repair_receipt_to_wire(row),
                        "status": "failed_retryable",
                        "reason": "memory_root_unavailable",
                    }
                )
                continue
            if service is None:
                service = build_repair_flush_service()
            with using_gateway(
                row.gateway_id
            ):  # the queue spans gateways; each row acts in its own
                result = repair_durable_receipt_source(
                    row, memory_root=root, flush_service=service, now_ms=now, agent_id=agent
                )
            if result.get("reason") == "repair_already_claimed":
                continue
            results.append(result)
        return summary_results + results


def configured_agent_ids() -> list[str]:
    """``OPENSQUILLA_AGENTS`` (a list, or comma-separated text), normalised (``op%`` -> ``op``)."""
    value = getattr(settings, "OPENSQUILLA_AGENTS", None) or []
    items = value.split(",") if isinstance(value, str) else list(value)
    return [normalize_agent_id(item) for item in items if str(item).strip()]


def workspace_agent_ids() -> list[str]:
    """Agents whose ``{agent}`` memory workspace exists and holds a raw-fallback directory.

    Only when ``OPENSQUILLA_MEMORY_WORKSPACE`` contains ``{agent}``: the directory names
    that fill the placeholder are the agents. Names that do not normalise to themselves
    are left out, because the worker would look in the normalised agent's directory.
    """
    template = memory_workspace_template()
    if not template or "{agent}" not in template:
        return []
    before, _, after = template.partition("{agent}")
    pattern = re.compile(re.escape(before) + r"([^/\\]+)" + re.escape(after))
    found = set()
    for match in glob.glob(glob.escape(before) + "*" + glob.escape(after)):
        parsed = pattern.fullmatch(match)
        if parsed is None or not (Path(match) / RAW_FALLBACK_DIR).is_dir():
            continue
        agent = parsed.group(1)
        if normalize_agent_id(agent) == agent:
            found.add(agent)
    return sorted(found)


def repair_agent_ids() -> list[str]:
    """Every agent the tick scans (docs/WORKERS.md, "Which agents the tick scans").

    ``main``; the configured agents (``OPENSQUILLA_AGENTS``); agents of known sessions;
    agents with rows in the repair queue; and agents whose ``{agent}`` memory workspace has a
    raw-fallback directory, so a legacy archive is found even for an agent the database
    has never seen.
    """
    agents = {"main", *configured_agent_ids(), *workspace_agent_ids()}
    # order_by() drops the models' default ordering, which DISTINCT would otherwise include.
    sessions = Session.objects.order_by().values_list("agent_id", flat=True).distinct()
    queued = (
        MemoryDurableReceipt.objects.filter(status__in=REPAIR_QUEUE_STATUSES)
        .exclude(agent_id="")
        .order_by()
        .values_list("agent_id", flat=True)
        .distinct()
    )
    agents.update(normalize_agent_id(a) for a in [*sessions, *queued] if a)
    return sorted(agents)


def _brief(result: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "sourceType": result.get("sourceType"),
        "summaryId": result.get("summaryId"),
        "receiptId": result.get("receiptId"),
        "status": result.get("status"),
        "reason": result.get("reason"),
        "repairStatus": result.get("repairStatus"),
    }


def run_repair_tick(*, now_ms: int | None = None, asked: bool = False) -> dict[str, Any]:
    """The beat task's body (the central tick): recover stale claims of every gateway once
    (a database-only step), then the repair pass of the gateway this worker serves (``local``
    on the central worker). Another gateway's rows are repaired by its own worker's tick
    (:func:`run_gateway_repair_tick`, queued by :func:`queue_gateway_ticks`), since the repair
    reads and writes that gateway's memory workspace.

    Returns a small JSON-able summary (it becomes the Celery result): how many claims were
    recovered, which agents were scanned, and one line per processed row.

    ``asked``: an operator asked for this pass (``manage.py repair_once``), so it runs even
    where the gateway repairs its own rows; the legacy archive import still waits for the
    handover (docs/MIRROR.md, "Nothing done to a gateway unasked").
    """
    with audit.acting_as(audit.WORKER):
        recovered = recover_stale_repair_claims(now_ms)
    return _repair_pass(served_gateway(), now_ms=now_ms, recovered=recovered, asked=asked)


def run_gateway_repair_tick(gateway: str, *, now_ms: int | None = None) -> dict[str, Any]:
    """One gateway's repair pass, on that gateway's worker: its due rows, its degraded
    compaction summaries and its workspace's legacy archives. ``MisroutedWork`` when this
    worker does not serve ``gateway``."""
    check_served(gateway, what="a repair tick")
    return _repair_pass(gateway, now_ms=now_ms, recovered=0)


def queue_gateway_ticks() -> list[str]:
    """Queue the repair pass of every gateway other than ``local`` whose repairs were handed
    to this console to its own worker; returns the gateways queued. A gateway that runs its own
    repair loop gets none (docs/MIRROR.md, "Nothing done to a gateway unasked"). A gateway with no live worker on its queue is skipped (nothing would
    run it; its rows stay due, and the liveness page says so), and so is one whose last tick
    is still in the outbox, so a dead worker never piles ticks up."""
    names = list(
        Gateway.objects.filter(repairs_here_q())
        .exclude(name=DEFAULT_GATEWAY)
        .values_list("name", flat=True)
    )
    if not names:
        return []
    consumers = live_queue_consumers()
    waiting = enqueue.outstanding_gateway_ticks()
    queued = []
    for name in names:
        if name in waiting:
            continue
        if consumers is not None and not consumers.get(str(gateway_queue(name))):
            continue
        enqueue.send(enqueue.repair_tick_message(name))
        queued.append(name)
    return queued


def _repair_pass(
    gateway: str, *, now_ms: int | None, recovered: int, asked: bool = False
) -> dict[str, Any]:
    if not asked and not repairs_handed_over(gateway):
        # Checked again where the pass runs: a tick queued before the handover was withdrawn,
        # or the central tick of a ``local`` whose repairs an admin gave back to its gateway.
        logger.info("memory_repair.tick skipped: gateway %s repairs its own rows", gateway)
        return {
            "gateway": gateway,
            "recovered": recovered,
            "skipped": "repairs_are_the_gateways_own",
            "agents": [],
            "processed": [],
            "counts": {},
        }
    limit = max(1, int(getattr(settings, "OPENSQUILLA_REPAIR_MAX_ITEMS_PER_TICK", 5) or 5))
    with audit.acting_as(audit.WORKER), using_gateway(gateway):
        agents = repair_agent_ids()
        results: list[dict[str, Any]] = []
        for agent in agents:
            if len(results) >= limit:
                break
            results.extend(
                run_memory_repair_once(
                    agent,
                    limit=limit - len(results),
                    now_ms=now_ms,
                    recover_stale=False,
                    known_agents=agents,
                )
            )
    counts = Counter(str(r.get("status")) for r in results)
    summary = {
        "gateway": gateway,
        "recovered": recovered,
        "agents": agents,
        "processed": [_brief(r) for r in results],
        "counts": dict(counts),
    }
    logger.info("memory_repair.tick %s", json.dumps(summary["counts"], sort_keys=True))
    return summary


def repair_one(receipt_id: str, *, now_ms: int | None = None) -> dict[str, Any]:
    """Repair one row now, if it is queued and due (after an operator requeue, say).

    A missing row, or one that is not claimable (already running, done, not yet due),
    comes back ``skipped`` with the reason and is left as it is.
    """
    with audit.acting_as(audit.WORKER):
        try:
            row = ledger.get_memory_durable_receipt(receipt_id)
        except KeyError:
            return {"receiptId": receipt_id, "status": "skipped", "reason": "receipt_missing"}
        now = wall_clock_ms() if now_ms is None else now_ms
        try:
            # The archive is in the row's gateway's memory workspace: only its worker has it.
            check_served(row.gateway_id, what=f"repair {row.receipt_id}")
        except MisroutedWork as exc:
            logger.error("%s", exc)
            return {**repair_receipt_to_wire(row), "status": "skipped", "reason": "misrouted"}
        if row.status not in REPAIR_QUEUE_STATUSES:
            return {**repair_receipt_to_wire(row), "status": "skipped", "reason": "not_queued"}
        if row.next_retry_at_ms is not None and row.next_retry_at_ms > now:
            return {**repair_receipt_to_wire(row), "status": "skipped", "reason": "not_due"}
        agent = normalize_agent_id(row.agent_id or "main")
        root = memory_workspace_for_agent(agent)
        if root is None:
            return {
                **repair_receipt_to_wire(row),
                "status": "failed_retryable",
                "reason": "memory_root_unavailable",
            }
        with using_gateway(row.gateway_id):
            return repair_durable_receipt_source(
                row,
                memory_root=root,
                flush_service=build_repair_flush_service(),
                now_ms=now,
                agent_id=agent,
            )
