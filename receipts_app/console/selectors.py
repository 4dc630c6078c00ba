"""Console-only reads: overview aggregates, failure groups, chart buckets, audit paging,
related receipts and the file preview.

Each function owns its query shape and issues a fixed number of queries, so pages built on
them stay at a constant query count whatever the data size.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Count, F, Max, Q, QuerySet, Value
from django.db.models.fields import BigIntegerField
from django.db.models.functions import Cast

from opensquilla_site.exceptions import ValidationFailed
from opensquilla_site.pagination import Page, keyset_after, keyset_page
from opensquilla_site.timeutil import now_ms
from sessions_app.gateways import DEFAULT_GATEWAY, gateway_scope, served_gateway
from sessions_app.keys import normalize_agent_id
from sessions_app.models import Session

from ..counts import CountRow, per_column, receipt_counts
from ..failure_groups import fingerprint_reason as fingerprint_reason
from ..ledger import literal_prefix
from ..ledger.triggers import GROUPS, INBOX, MEMBERS
from ..mirror.models import MirroredReceipt, MirroredSession
from ..models import FailureGroupMember, MemoryDurableReceipt, ReceiptEvent, RequeuePlan
from ..restore import LossReport, loss_for_receipt
from ..restore.files import ELSEWHERE, NO_FILE, READABLE, locate_checkpoint
from ..selectors import ReceiptFilter
from ..statuses import CHECKPOINT_SAVED, FAILURE_STATUSES, ROW_REQUEUEABLE_STATUSES

# --- overview counts ----------------------------------------------------------------------


def counts_by(column: str, rows: Iterable[CountRow] | None = None) -> list[tuple[str, int]]:
    """``(value, count)`` per distinct ``column`` (scope, agent_id or status), largest first,
    from the counts table (``rows`` when the caller already read it)."""
    return per_column(receipt_counts() if rows is None else rows, column)


# --- failure groups -----------------------------------------------------------------------

# Groups shown on the overview, largest first.
FAILURE_GROUPS_SHOWN = 50


@dataclass
class FailureGroup:
    agent_id: str
    scope: str
    status: str
    fingerprint: str
    count: int = 0
    first_seen: int = 0
    last_seen: int = 0
    sample_receipt_id: str = ""
    gateway_id: str = DEFAULT_GATEWAY

    @property
    def requeueable(self) -> bool:
        """Whether "Requeue" can move its rows (a requeued checkpoint is already in flight)."""
        return self.status in ROW_REQUEUEABLE_STATUSES

    @property
    def filter_params(self) -> dict[str, Any]:
        """Query parameters of the receipts list that show exactly this group's receipts."""
        return ReceiptFilter(
            agent=self.agent_id or None,
            scopes=(self.scope,),
            statuses=(self.status,),
            fingerprint=self.fingerprint,
            gateway=self.gateway_id,
        ).to_params()


# A plan of one failure group holds at most this many rows (a bigger group is planned from
# the receipts list, whose filter a plan can freeze).
GROUP_PLAN_LIMIT = 10_000


@dataclass(frozen=True)
class GroupSelection:
    """A group's receipts as the page showed it, and how many joined it since."""

    receipt_ids: list[str]
    arrived_since: int


def failure_group_receipt_ids(
    *,
    gateway_id: str = DEFAULT_GATEWAY,
    agent_id: str,
    scope: str,
    status: str,
    fingerprint: str,
    upto: int | None = None,
    limit: int = GROUP_PLAN_LIMIT,
) -> GroupSelection:
    """The receipts counted in exactly one failure group (its members, so never a look-alike
    group's rows), oldest first, still in the group's status: those that had joined by the
    page's mark ``upto`` (``FailureGroups.mark``; None: all), at most ``limit + 1``; and the
    number that joined after the mark."""
    members = FailureGroupMember.objects.filter(
        gateway_id=gateway_id,
        agent_id=agent_id,
        scope=scope,
        status=status,
        fingerprint=fingerprint,
    )
    shown = members if upto is None else members.filter(id__lte=upto)
    ids = list(
        MemoryDurableReceipt.objects.filter(
            receipt_id__in=shown.values("receipt_id"), status=status, scope=scope
        )
        .order_by("created_at", "id")
        .values_list("receipt_id", flat=True)[: limit + 1]
    )
    arrived = 0 if upto is None else members.filter(id__gt=upto).count()
    return GroupSelection(receipt_ids=ids, arrived_since=arrived)


@dataclass
class FailureGroups:
    """The largest groups; ``total_groups`` and ``failures`` cover the whole ledger.

    ``pending``: failures that arrived (or left) since the last fold and are not in the groups
    yet (the beat task folds them within ``OPENSQUILLA_AGGREGATE_FOLD_SECONDS``). ``mark``:
    the newest membership the page saw; a plan of a group takes its members up to it.
    """

    groups: list[FailureGroup] = field(default_factory=list)
    total_groups: int = 0
    failures: int = 0
    pending: int = 0
    mark: int = 0

    @property
    def truncated(self) -> bool:
        return self.total_groups > len(self.groups)


# How far the pending count is counted (shown as "10,000+" past it).
PENDING_CAP = 10_000

_GROUPS_SQL = (
    # One query: the pending count and the mark always come back, even with no group row.
    "SELECT p.pending, g.agent_id, g.scope, g.status, g.fingerprint, g.count, g.first_seen, "  # noqa: S608
    "g.last_seen, g.sample_receipt_id, g.total_groups, g.failures, "
    f"(SELECT MAX(id) FROM {MEMBERS}), g.gateway_id "
    # In id order, so PostgreSQL walks the primary key: the inbox is a queue (beat folds and
    # deletes it), and until VACUUM a sequential scan re-reads every deleted row on every render
    # (10 ms after 300,000 folded failures at 5M receipts); index entries of deleted rows are
    # marked dead on the first pass and skipped after it (1.7 ms).
    f"FROM (SELECT COUNT(*) AS pending FROM (SELECT 1 FROM {INBOX} ORDER BY id "
    f"LIMIT {PENDING_CAP + 1}) "
    "AS i) AS p LEFT JOIN ("
    "SELECT id, gateway_id, agent_id, scope, status, fingerprint, count, first_seen, last_seen, "
    "sample_receipt_id, COUNT(*) OVER () AS total_groups, SUM(count) OVER () AS failures "
    # {gateway}: every gateway's groups, or one gateway's when a list was scoped to it.
    f"FROM {GROUPS} WHERE count > 0{{gateway}} ORDER BY count DESC, last_seen DESC, id LIMIT %s"
    ") AS g ON 1 = 1 ORDER BY g.count DESC, g.last_seen DESC, g.id"
)


def failure_groups(*, limit: int = FAILURE_GROUPS_SHOWN) -> FailureGroups:
    """Every failed receipt in the ledger (or in the gateway a list is scoped to,
    ``sessions_app.gateways.gateway_scope``) grouped by ``(gateway, agent, scope, status,
    fingerprint)``, largest first, as last folded (``receipts_app.failure_groups``). One query."""
    scope = gateway_scope()
    sql = _GROUPS_SQL.replace("{gateway}", "" if scope is None else " AND gateway_id = %s")
    params: list[Any] = [limit] if scope is None else [scope, limit]
    with connection.cursor() as cur:
        cur.execute(sql, params)
        rows = cur.fetchall()
    pending = int(rows[0][0]) if rows else 0
    mark = int(rows[0][11] or 0) if rows else 0
    found = [r for r in rows if r[2] is not None]
    return FailureGroups(
        groups=[
            FailureGroup(
                agent_id=r[1],
                scope=r[2],
                status=r[3],
                fingerprint=r[4],
                count=int(r[5]),
                first_seen=int(r[6]),
                last_seen=int(r[7]),
                sample_receipt_id=r[8],
                gateway_id=r[12],
            )
            for r in found
        ],
        total_groups=int(found[0][9]) if found else 0,
        failures=int(found[0][10]) if found else 0,
        pending=pending,
        mark=mark,
    )


# --- receipts over time -------------------------------------------------------------------

RANGES: Mapping[str, tuple[int, int]] = {
    # name: (bucket width in ms, number of buckets)
    "24h": (3_600_000, 24),
    "7d": (6 * 3_600_000, 28),
    "30d": (86_400_000, 30),
}


@dataclass
class Bucket:
    start: int
    total: int
    failed: int


@dataclass
class Timeline:
    range_name: str
    buckets: list[Bucket]
    peak: int

    def bars(self, *, width: int = 600, height: int = 120) -> list[dict[str, Any]]:
        """Bar geometry for the server-rendered SVG chart."""
        n = max(1, len(self.buckets))
        slot = width / n
        scale = (height - 4) / max(1, self.peak)
        out = []
        for index, bucket in enumerate(self.buckets):
            total_h = round(bucket.total * scale, 1)
            failed_h = round(bucket.failed * scale, 1)
            out.append(
                {
                    "x": round(index * slot + 1, 1),
                    "w": round(max(1.0, slot - 2), 1),
                    "y": round(height - total_h, 1),
                    "h": total_h,
                    "fy": round(height - failed_h, 1),
                    "fh": failed_h,
                    "bucket": bucket,
                }
            )
        return out


def receipts_over_time(range_name: str = "24h", *, now: int | None = None) -> Timeline:
    """Receipts created per bucket over the range, with failures, in one grouped query."""
    if range_name not in RANGES:
        range_name = "24h"
    width, count = RANGES[range_name]
    end = (now if now is not None else now_ms()) // width * width + width
    start = end - width * count
    rows = (
        MemoryDurableReceipt.objects.filter(created_at__gte=start, created_at__lt=end)
        .order_by()
        .annotate(
            bucket=Cast(
                (F("created_at") - Value(start, output_field=BigIntegerField()))
                / Value(width, output_field=BigIntegerField()),
                output_field=BigIntegerField(),
            )
        )
        .values("bucket")
        .annotate(total=Count("id"), failed=Count("id", filter=Q(status__in=FAILURE_STATUSES)))
    )
    by_index: dict[int, tuple[int, int]] = {
        int(r["bucket"]): (int(r["total"]), int(r["failed"])) for r in rows
    }
    buckets = [Bucket(start + i * width, *by_index.get(i, (0, 0))) for i in range(count)]
    return Timeline(range_name, buckets, max((b.total for b in buckets), default=0))


# --- audit log ----------------------------------------------------------------------------

AUDIT_PARAMS = ("actor", "surface", "action", "receipt_id", "plan_id")


def audit_filters_from(params: Mapping[str, Any]) -> dict[str, str]:
    """The audit filters in ``params``: trimmed, bounded text; raises ``ValidationFailed``."""
    out: dict[str, str] = {}
    errors: dict[str, str] = {}
    for name in AUDIT_PARAMS:
        value = str(params.get(name) or "").strip()
        if not value:
            continue
        if len(value) > 200 or "\x00" in value:
            errors[name] = f"{name} is not a valid value"
            continue
        out[name] = value
    if "surface" in out and out["surface"] not in ReceiptEvent.SURFACES:
        errors["surface"] = f"surface must be one of {', '.join(ReceiptEvent.SURFACES)}"
    if errors:
        raise ValidationFailed("; ".join(errors.values()), extra={"fields": errors})
    return out


def page_audit_events(
    filters: Mapping[str, str], *, cursor: str | None = None, limit: int = 50
) -> Page:
    """Events newest first, filtered exactly by actor, surface, action, receipt or plan, and
    in the gateway a list is scoped to (``?gateway=``): ``ReceiptEvent``'s manager keeps the
    events recorded for that gateway's receipts and sessions."""
    qs: QuerySet[ReceiptEvent] = ReceiptEvent.objects.all()
    for name in AUDIT_PARAMS:
        if filters.get(name):
            qs = qs.filter(**{name: filters[name]})
    return keyset_page(qs, cursor=cursor, limit=limit)


def receipt_version(receipt: MemoryDurableReceipt, last_event_pk: int | None = -1) -> str:
    """What the detail page shows, as one token: the row's stamp and its newest event.

    Every write moves ``updated_at`` and every action (even one that changes nothing)
    appends an event, so a poller holding the token learns with two indexed reads whether
    a re-render would differ. ``last_event_pk`` saves the second read when the caller has
    the timeline already (``None``: no events).
    """
    if last_event_pk == -1:
        last_event_pk = (
            ReceiptEvent.objects.filter(receipt_id=receipt.receipt_id)
            .order_by("-created_at", "-id")
            .values_list("id", flat=True)
            .first()
        )
    return f"{receipt.updated_at}.{last_event_pk or 0}"


TIMELINE_LIMIT = 200


def newest_event_pk(timeline: list[ReceiptEvent]) -> int | None:
    """The newest event's pk from a timeline read, or -1 when the read was cut short."""
    if len(timeline) >= TIMELINE_LIMIT:
        return -1
    return timeline[-1].pk if timeline else None


def receipt_timeline(receipt_id: str, *, limit: int = TIMELINE_LIMIT) -> list[ReceiptEvent]:
    return list(
        ReceiptEvent.objects.filter(receipt_id=receipt_id).order_by("created_at", "id")[:limit]
    )


# --- related receipts ---------------------------------------------------------------------


def idempotency_family_prefix(receipt: MemoryDurableReceipt) -> str | None:
    """The key up to and including its turn segment: every producer puts the session key and
    turn id before the hash/outcome parts, so rows of one piece of work share this prefix."""
    key = receipt.idempotency_key or ""
    turn = receipt.turn_id or ""
    if turn:
        marker = f":{turn}:"
        index = key.find(marker)
        if index >= 0:
            return key[: index + len(marker)]
    head, sep, _tail = key.rpartition(":")
    return head + sep if head else None


def related_receipts(
    receipt: MemoryDurableReceipt, *, limit: int = 20
) -> list[MemoryDurableReceipt]:
    """Same idempotency family, the receipt that resolved this one, and those it resolved."""
    condition = Q(resolved_by_receipt_id=receipt.receipt_id)
    if receipt.resolved_by_receipt_id:
        condition |= Q(receipt_id=receipt.resolved_by_receipt_id)
    prefix = idempotency_family_prefix(receipt)
    if prefix:
        family = literal_prefix(
            MemoryDurableReceipt.objects.filter(
                gateway_id=receipt.gateway_id, session_key=receipt.session_key
            ),
            "idempotency_key",
            prefix,
        )
        condition |= Q(pk__in=family.values("pk")[: limit * 2])
    return list(
        MemoryDurableReceipt.objects.filter(condition)
        .exclude(pk=receipt.pk)
        .for_console()
        .order_by("-created_at", "-id")[:limit]
    )


# --- file preview -------------------------------------------------------------------------

PREVIEW_LIMIT = 64 * 1024


@dataclass
class Preview:
    path_field: str
    stored_path: str
    text: str = ""
    size: int = 0
    truncated: bool = False
    error: str = ""


def _workspace_roots(agent_id: str) -> list[Path]:
    """The configured workspaces a receipt's files may live in; nothing else is readable."""
    roots: list[Path] = []
    checkpoint = getattr(settings, "OPENSQUILLA_CHECKPOINT_WORKSPACE", None)
    memory = getattr(settings, "OPENSQUILLA_MEMORY_WORKSPACE", None)
    if checkpoint:
        roots.append(Path(checkpoint).expanduser())
    if memory:
        roots.append(
            Path(
                str(memory).replace("{agent}", normalize_agent_id(agent_id or "main"))
            ).expanduser()
        )
    return [root.resolve() for root in roots]


def _inside(root: Path, target: Path) -> bool:
    return target == root or root in target.parents


def resolve_receipt_file(stored: str, roots: list[Path]) -> Path | None:
    """``stored`` resolved inside one of ``roots`` (symlinks followed), else None."""
    if not stored or stored.startswith("session:") or "\x00" in stored:
        return None
    candidate = Path(stored)
    for root in roots:
        target = (candidate if candidate.is_absolute() else root / candidate).resolve()
        if _inside(root, target) and target.is_file():
            return target
    return None


def receipt_preview(receipt: MemoryDurableReceipt, *, limit: int = PREVIEW_LIMIT) -> Preview | None:
    """The first ``limit`` bytes of the checkpoint JSONL or raw archive the receipt names.

    Only files inside the configured workspaces are read, and only for a receipt of the
    gateway this process serves: another gateway's relative paths would resolve into this
    host's workspaces (session keys overlap), showing a file that is not the receipt's. The
    text is returned raw; the template escapes it.
    """
    roots = _workspace_roots(receipt.agent_id)
    candidates = [
        ("source_path", receipt.source_path),
        ("target_path", receipt.target_path),
    ]
    named = [
        (name, value) for name, value in candidates if value and not value.startswith("session:")
    ]
    if not named:
        return None
    if receipt.gateway_id != served_gateway():
        name, value = named[0]
        return Preview(
            name,
            value,
            error=(
                f"the file is on gateway {receipt.gateway_id}'s host; this process serves "
                f"{served_gateway()}'s workspaces"
            ),
        )
    for name, value in named:
        target = resolve_receipt_file(value, roots)
        if target is None:
            continue
        try:
            size = target.stat().st_size
            with target.open("rb") as handle:
                data = handle.read(limit + 1)
        except OSError as exc:
            return Preview(name, value, error=f"could not read the file: {exc.strerror or exc}")
        return Preview(
            name,
            value,
            text=data[:limit].decode("utf-8", errors="replace"),
            size=size,
            truncated=len(data) > limit,
        )
    name, value = named[0]
    return Preview(
        name, value, error="the file is not in a configured workspace or no longer exists"
    )


@dataclass
class CheckpointPanel:
    """The receipt page's checkpoint panel: where the file is, and the loss when it is gone."""

    state: str
    stored_path: str
    message: str = ""
    loss: LossReport | None = None


def checkpoint_panel(receipt: MemoryDurableReceipt) -> CheckpointPanel | None:
    """Where a checkpoint receipt's file is (a stat, no read). The loss report is worked out
    when the file is not here to read, or when the row's status says it no longer reads back
    as saved (anything but ``checkpoint_saved`` with a file named: the scrub's findings)."""
    if receipt.scope != "checkpoint" or not receipt.source_path:
        return None
    located = locate_checkpoint(receipt)
    if located.state == NO_FILE:
        return None
    panel = CheckpointPanel(located.state, located.stored_path, located.message)
    if located.state not in (READABLE, ELSEWHERE) or receipt.status != CHECKPOINT_SAVED:
        panel.loss = loss_for_receipt(receipt)
    return panel


# --- requeue plans ------------------------------------------------------------------------


def page_plans(
    *, before: str | None = None, limit: int = 50
) -> tuple[list[RequeuePlan], str | None]:
    """Plans newest first, keyset-paged on ``(created_at, plan_id)``; in the gateway a list is
    scoped to (``?gateway=``), the plans whose frozen filter names that gateway.

    ``before`` is ``"<created_at>:<plan_id>"`` from the previous page; anything else raises
    ``ValidationFailed``.
    """
    qs = RequeuePlan.objects.order_by("-created_at", "-plan_id")
    scope = gateway_scope()
    if scope is not None:
        qs = qs.filter(filters__gateway=scope)
    if before:
        stamp_text, _sep, plan_id = before.partition(":")
        try:
            stamp = int(stamp_text)
        except ValueError:
            raise ValidationFailed(
                "the page marker is not valid; start again from the first page"
            ) from None
        qs = keyset_after(
            qs,
            order_field="created_at",
            value=stamp,
            tie_field="plan_id",
            tie_value=plan_id,
            newest_first=True,
        )
    rows = list(qs[: limit + 1])
    marker = None
    if len(rows) > limit:
        rows = rows[:limit]
        marker = f"{rows[-1].created_at}:{rows[-1].plan_id}"
    return rows, marker


def session_memory_version(session: Session) -> str:
    """What the session memory panel shows, as one token: the session's generation and
    stamp (new messages move it) and its receipts' count and newest stamp. One query."""
    seen = MemoryDurableReceipt.objects.filter(
        gateway_id=session.gateway_id, session_key=session.session_key
    ).aggregate(n=Count("id"), newest=Max("updated_at"))
    return f"{session.session_id}.{session.updated_at}.{seen['n']}.{seen['newest'] or 0}"


def session_checkpoints(session_key: str, *, limit: int = 50) -> list[MemoryDurableReceipt]:
    """Checkpoint receipts of every generation of the key in the current gateway, newest
    first (bounded)."""
    return list(
        MemoryDurableReceipt.objects.here()
        .filter(session_key=session_key, scope="checkpoint")
        .for_console()
        .order_by("-created_at", "-id")[:limit]
    )


@dataclass(frozen=True)
class UpstreamMark:
    """Where a mirrored row came from, and whether the gateway has since deleted it there."""

    source: str
    gone_at: int | None
    upstream_status: str = ""
    # Deleted upstream by the gateway's upgrade to 0.5.5+ (V044), not by a delete.
    retired_at: int | None = None
    gateway: str = ""  # what a viewer reads instead of ``source`` (mirror/exposure.py)


def upstream_marks_for_receipt(receipt: MemoryDurableReceipt) -> list[UpstreamMark]:
    """The live mirror's word on one receipt (one row per followed source of its gateway;
    none if not mirrored): gone upstream rows stay here, marked (docs/MIRROR.md)."""
    rows = MirroredReceipt.objects.filter(
        source__gateway_id=receipt.gateway_id, idempotency_key=receipt.idempotency_key
    ).values_list("source__path", "gone_at", "source_status", "retired_at")
    return [
        UpstreamMark(path, gone, status, retired, str(receipt.gateway_id))
        for path, gone, status, retired in rows
    ]


def upstream_marks_for_session(session: Session) -> list[UpstreamMark]:
    rows = MirroredSession.objects.filter(
        source__gateway_id=session.gateway_id, session_key=session.session_key
    ).values_list("source__path", "gone_at")
    return [UpstreamMark(path, gone, gateway=str(session.gateway_id)) for path, gone in rows]
