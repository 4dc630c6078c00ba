"""The gateway: one OpenSquilla deployment (a profile, a container, a host) whose ledger the
console holds. Session keys overlap between gateways by construction, so every session,
transcript entry, compaction and receipt belongs to exactly one gateway, and a session key and
an idempotency key are unique within it.

This module is the one place the concept lives. It owns the **current gateway**, a context
variable that each edge sets once (the importer and mirror for their source, the API and the
console for a request's ``?gateway=``, a task for the rows it was queued for) with
:func:`using_gateway`, and that every query reads:

- writes and addresses by session key act in :func:`current_gateway` (``local`` when no edge
  chose one), through the ``default`` of every ``gateway`` column and :meth:`GatewayQuerySet.here`;
- lists span every gateway unless an edge chose one (:func:`gateway_scope`), through
  :class:`GatewayManager`, the default manager of every gateway-owned model.

So the Python API, the seed contract and every row written without naming a gateway read
exactly as before: they are the ``local`` gateway's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import wraps
from typing import Any, Self, TypeVar

from django.conf import settings
from django.db import models

from opensquilla_site.timeutil import now_ms

# Re-exported: the address and variable rules are the link policy's, named here as before.
from .link_policy import DEFAULT_RPC_PORT as DEFAULT_RPC_PORT
from .link_policy import ENV_VAR_NAME_PATTERN as ENV_VAR_NAME_PATTERN
from .link_policy import (
    LINK_VARIABLE_PREFIX,
    read_token,
    token_env_refusal,
    validate_link_address,
    validate_token_env,
)
from .link_policy import rpc_ws_url as rpc_ws_url

DEFAULT_GATEWAY = "local"
GATEWAY_NAME_MAX = 64
_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9_-]{0,62}[a-z0-9])?$")

# None: no edge chose a gateway (writes go to ``local``, lists span every gateway).
_chosen: ContextVar[str | None] = ContextVar("opensquilla_gateway", default=None)


class GatewayNameError(ValueError):
    """A gateway name that is not a slug."""


def validate_gateway_name(name: object) -> str:
    """``name`` if it is a slug (lower-case letters, digits, ``-`` and ``_``; at most 64)."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise GatewayNameError(
            f"gateway name {name!r} is not a slug: use 1 to {GATEWAY_NAME_MAX} lower-case "
            "letters, digits, '-' or '_', starting and ending with a letter or digit"
        )
    return name


def current_gateway() -> str:
    """The gateway writes and addresses by session key act in (``local`` by default)."""
    return _chosen.get() or DEFAULT_GATEWAY


def gateway_scope() -> str | None:
    """The gateway lists are restricted to; None (every gateway) unless an edge chose one."""
    return _chosen.get()


@contextmanager
def using_gateway(name: str | None) -> Iterator[str]:
    """Act as gateway ``name`` inside the block (None: as no gateway was chosen)."""
    if name is not None:
        validate_gateway_name(name)
    token = _chosen.set(name)
    try:
        yield current_gateway()
    finally:
        _chosen.reset(token)


# --- where a gateway's work runs --------------------------------------------------------------
#
# A checkpoint retake or a repair of a gateway's row needs that gateway's workspaces, which only
# its own host has. So every task for a gateway's rows goes to the Celery queue of that gateway
# (``gateway.<name>``), consumed by a worker started on its host (``Procfile.edge``); ``local``'s
# rows keep the default queues. A worker knows the gateway whose workspaces it was given from
# ``OPENSQUILLA_GATEWAY`` (``local`` when unset) and refuses rows of any other.

GATEWAY_QUEUE_PREFIX = "gateway."


class MisroutedWork(RuntimeError):
    """A task for one gateway's rows reached a worker of another gateway's workspaces."""


def gateway_queue(name: str | None) -> str | None:
    """The Celery queue of gateway ``name``'s work; None for ``local`` (the default queues)."""
    if not name or name == DEFAULT_GATEWAY:
        return None
    prefix = getattr(settings, "OPENSQUILLA_GATEWAY_QUEUE_PREFIX", None) or GATEWAY_QUEUE_PREFIX
    return f"{prefix}{name}"


def served_gateway() -> str:
    """The gateway whose workspaces this process was given (``OPENSQUILLA_GATEWAY``)."""
    return getattr(settings, "OPENSQUILLA_GATEWAY", None) or DEFAULT_GATEWAY


def check_served(gateway: str | None, *, what: str) -> None:
    """Raise ``MisroutedWork`` unless this process serves ``gateway`` (None: ``local``)."""
    wanted = gateway or DEFAULT_GATEWAY
    here = served_gateway()
    if wanted != here:
        queue = gateway_queue(wanted) or "the default queue"
        raise MisroutedWork(
            f"misrouted: {what} belongs to gateway {wanted}, but this worker serves gateway "
            f"{here} (OPENSQUILLA_GATEWAY) and its workspaces; it runs on a worker for {queue}"
        )


# Who consumes which queue is known to the worker heartbeats (operations_app), which this
# module may not import: the reader is registered at start-up, like the session purgers.
QueueConsumers = Callable[[], dict[str, list[str]]]
_consumer_readers: list[QueueConsumers] = []


def register_queue_consumers(reader: QueueConsumers) -> None:
    """Install the reader of ``{queue: [live worker names]}`` (a database read, no broadcast)."""
    if reader not in _consumer_readers:
        _consumer_readers.append(reader)


def live_queue_consumers() -> dict[str, list[str]] | None:
    """``{queue: [live worker names]}``; None when nothing can tell (no reader installed)."""
    if not _consumer_readers:
        return None
    merged: dict[str, list[str]] = {}
    for reader in _consumer_readers:
        for queue, workers in reader().items():
            merged.setdefault(queue, []).extend(workers)
    return merged


def no_worker_warnings(gateways: Iterable[str]) -> list[str]:
    """One sentence per gateway of ``gateways`` whose queue no live worker consumes.

    ``local`` (the default queues, the central process set's) is not checked here. Work is
    still accepted (it waits in the outbox and the broker); the operator is told it waits.
    """
    names = sorted({g for g in gateways if gateway_queue(g) is not None})
    if not names:
        return []
    consumers = live_queue_consumers()
    if consumers is None:
        return []
    warnings = []
    for name in names:
        queue = gateway_queue(name)
        if not consumers.get(str(queue)):
            warnings.append(no_worker_warning(name))
    return warnings


def no_worker_warning_for(name: str | None) -> str | None:
    """The :func:`no_worker_warnings` sentence for gateway ``name``'s queued work, or None."""
    return next(iter(no_worker_warnings([name or DEFAULT_GATEWAY])), None)


def no_worker_warning(name: str) -> str:
    return (
        f"gateway {name} has no live worker on queue {gateway_queue(name)}: "
        "the work will wait until one starts"
    )


# --- the link to its RPC ------------------------------------------------------------------


def validate_rpc_address(value: str) -> None:
    """The address's shape and the server's bound on it (``link_policy``)."""
    validate_link_address(value)


def default_token_env(name: str) -> str:
    """``OPENSQUILLA_GATEWAY_TOKEN_<NAME>``: the name upper-cased, ``-`` as ``_``."""
    return "OPENSQUILLA_GATEWAY_TOKEN_" + re.sub(r"[^A-Z0-9_]", "_", name.upper())


# --- who repairs its rows ---------------------------------------------------------------------
#
# A gateway before 0.5.5 runs its own repair loop on its workspace: a second repairer (our
# worker) on the same files retries rows the gateway is retrying, writes sidecars it did not
# ask for and makes our copy of a row disagree with its own. So this console writes into a
# gateway's workspace only when an operator asks (a requeue, a plan, "checkpoint now", "flush
# now", "run due repairs") or once the gateway's repairs were handed to it: its periodic
# repair pass (and the legacy raw-fallback import) runs for those gateways only. ``local``'s
# repairs are this console's by default (rows written here, the README's single gateway);
# every other gateway's are its own until an admin hands them over (audited).

REPAIRS_GATEWAY = "gateway"
REPAIRS_CONSOLE = "console"
REPAIRS_CHOICES = (
    ("", "by default (local: this console; any other gateway: its own)"),
    (REPAIRS_GATEWAY, "the gateway's own"),
    (REPAIRS_CONSOLE, "this console"),
)


def repairs_are_ours(name: str, repairs: str) -> bool:
    """Whether this console repairs gateway ``name``'s rows, given its ``repairs`` setting."""
    if repairs:
        return repairs == REPAIRS_CONSOLE
    return name == DEFAULT_GATEWAY


def repairs_here_q() -> models.Q:
    """The gateways whose repairs are this console's, as a filter on ``Gateway``."""
    return models.Q(repairs=REPAIRS_CONSOLE) | models.Q(repairs="", name=DEFAULT_GATEWAY)


def repairs_handed_over(name: str | None) -> bool:
    """Whether this console's periodic repair pass may touch gateway ``name``'s workspace
    (``local`` when None; a gateway with no row yet reads as its default)."""
    wanted = name or DEFAULT_GATEWAY
    repairs = Gateway.objects.filter(name=wanted).values_list("repairs", flat=True).first()
    return repairs_are_ours(wanted, repairs or "")


# --- the model ------------------------------------------------------------------------------


class Gateway(models.Model):
    """One OpenSquilla deployment: its name, where it is followed from and what it last ran."""

    # The name is the key: every row's ``gateway_id`` is the gateway's name, readable as is.
    name = models.SlugField(max_length=GATEWAY_NAME_MAX, primary_key=True)
    display_name = models.CharField(max_length=200, blank=True, default="")
    # The sessions.db it is imported or followed from ("" for rows written here).
    source = models.TextField(blank=True, default="")
    # What the source said when last read: the OpenSquilla version (when the database names
    # it) and its schema (the newest applied migration, or the receipts table's shape).
    opensquilla_version = models.CharField(max_length=64, blank=True, default="")
    schema_version = models.CharField(max_length=200, blank=True, default="")
    last_seen_at = models.BigIntegerField(null=True, blank=True)
    created_at = models.BigIntegerField(default=now_ms)
    # Who repairs its rows (above): "" its default, or explicitly handed over. Changed only
    # through ``receipts_app.handover.set_repairs`` (admins, audited).
    repairs = models.CharField(max_length=16, blank=True, default="", choices=REPAIRS_CHOICES)
    # When its ledger was first seen retired (0.5.5's V044: no flush or repair pipeline left
    # upstream); None while it still has one.
    ledger_retired_at = models.BigIntegerField(null=True, blank=True)
    # The gateway link (docs/MIRROR.md#gateway-link): the gateway's own RPC, read on a
    # schedule. Empty: not linked. The token is never stored: only the name of the
    # environment variable that holds it (empty: OPENSQUILLA_GATEWAY_TOKEN_<NAME>).
    rpc_address = models.CharField(
        "RPC address",
        max_length=500,
        blank=True,
        default="",
        validators=[validate_rpc_address],
        help_text="ws://host:port/ws of the gateway (host:port works too); empty: not linked",
    )
    rpc_token_env = models.CharField(
        "token variable",
        max_length=128,
        blank=True,
        default="",
        validators=[validate_token_env],
        help_text="the environment variable holding the gateway's token (never the token "
        f"itself), named {LINK_VARIABLE_PREFIX}*; empty: {LINK_VARIABLE_PREFIX}<NAME>",
    )

    class Meta:
        ordering = ["name"]
        app_label = "sessions_app"

    def __str__(self) -> str:
        return self.name

    @property
    def label(self) -> str:
        return self.display_name or self.name

    @property
    def repairs_here(self) -> bool:
        """This console repairs its rows (its periodic pass writes into its workspace)."""
        return repairs_are_ours(self.name, self.repairs)

    @property
    def repairs_label(self) -> str:
        return "this console" if self.repairs_here else "the gateway's own"

    @property
    def token_env_name(self) -> str:
        """The environment variable the link reads the token from."""
        return self.rpc_token_env or default_token_env(self.name)

    @property
    def token_env_refusal(self) -> str | None:
        """Why the link may not read the named variable (a name stored before the prefix
        rule); None when it may."""
        return token_env_refusal(self.token_env_name)

    def link_token(self) -> str | None:
        """The gateway's token from the environment of the process asking (None: unset, or a
        variable the link may not read)."""
        return read_token(self.token_env_name)


def gateway_field() -> Any:
    """The ``gateway`` column of a gateway-owned model: the gateway's name, filled from
    :func:`current_gateway` when a row is made. No index of its own: the uniqueness
    constraints and the indexes that need it lead with it."""
    return models.ForeignKey(
        Gateway,
        on_delete=models.PROTECT,
        default=current_gateway,
        db_index=False,
        related_name="+",
    )


def ensure_gateway(name: str, **seen: Any) -> Gateway:
    """The gateway ``name`` (validated), created when new; ``seen`` fields are stored."""
    validate_gateway_name(name)
    gateway, _ = Gateway.objects.get_or_create(name=name, defaults={"display_name": name})
    changed = {k: v for k, v in seen.items() if getattr(gateway, k) != v}
    if changed:
        Gateway.objects.filter(name=name).update(**changed)
        for key, value in changed.items():
            setattr(gateway, key, value)
    return gateway


def known_gateway(name: str) -> Gateway:
    """The existing gateway ``name``; ``GatewayNameError`` (a ``ValueError``) for a bad name,
    ``KeyError`` when there is none (the API's 422 and 404)."""
    validate_gateway_name(name)
    gateway = Gateway.objects.filter(name=name).first()
    if gateway is None:
        raise KeyError(f"Gateway not found: {name}")
    return gateway


_V = TypeVar("_V", bound=Callable[..., Any])


def in_requested_gateway(view: _V) -> _V:
    """Run a request handler in the gateway its ``?gateway=`` names (none: no gateway chosen,
    so lists span every gateway and a session key addresses ``local``). Applied after
    authentication, so a caller without credentials learns nothing about gateways."""

    @wraps(view)
    def scoped(request: Any, *args: Any, **kwargs: Any) -> Any:
        name = request.GET.get("gateway") or None
        if name is not None:
            known_gateway(name)
        with using_gateway(name):
            return view(request, *args, **kwargs)

    return scoped  # type: ignore[return-value]


# --- queries --------------------------------------------------------------------------------

_M = TypeVar("_M", bound=models.Model)


class GatewayQuerySet(models.QuerySet[_M]):
    def here(self) -> Self:
        """The rows of the current gateway: every address by session key goes through it."""
        return self.filter(gateway_id=current_gateway())

    def of_gateway(self, name: str | None) -> Self:
        """The rows of gateway ``name``; every row when None."""
        return self if name is None else self.filter(gateway_id=name)


class GatewayManager(models.Manager[_M]):
    """Lists span every gateway, unless an edge chose one with :func:`using_gateway`."""

    def get_queryset(self) -> models.QuerySet[_M]:
        qs = super().get_queryset()
        scope = gateway_scope()
        return qs if scope is None else qs.filter(gateway_id=scope)
