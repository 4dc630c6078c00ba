"""Shared plumbing for the management commands: one-line errors, filters, actor, progress.

Commands parse input, call one service and print; this module keeps the parsing identical
across them. Receipt filters go through ``ReceiptFilter.from_params`` like the API's and the
console's, so ``--status checkpoint_failed --agent ops`` selects the rows
``/api/v1/receipts?status=checkpoint_failed&agent=ops`` returns.
"""

from __future__ import annotations

import getpass
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any, TypeVar, cast

from django.core.management.base import CommandError, CommandParser
from django.db import DatabaseError

from opensquilla_site.exceptions import ApplicationError

from ..audit import Actor
from ..selectors import RECEIPT_FILTER_FIELDS

T = TypeVar("T")

# Multi-valued parameters may be repeated; every flag is the parameter with dashes.
_MULTI = {f.param for f in RECEIPT_FILTER_FIELDS if f.kind == "many"}


def one_line(message: object) -> str:
    return " ".join(str(message).split())


def error_text(exc: BaseException) -> str:
    # KeyError's str() wraps its message in quotes; the message is what the operator needs.
    if isinstance(exc, KeyError) and exc.args:
        return one_line(exc.args[0])
    if isinstance(exc, ApplicationError):
        return one_line(exc.message)
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return one_line(f"{exc.strerror}{where}")
    return one_line(exc) or type(exc).__name__


@contextmanager
def cli_errors() -> Iterator[None]:
    """Turn the errors services raise into ``CommandError``: one line, exit status 1."""
    try:
        yield
    except CommandError:
        raise
    except (ApplicationError, ValueError, KeyError, OSError) as exc:
        raise CommandError(error_text(exc)) from exc
    except DatabaseError as exc:
        raise CommandError(f"database error: {error_text(exc)}") from exc


def default_actor_name() -> str:
    try:
        return os.environ.get("USER") or getpass.getuser() or "cli"
    except Exception:  # getpass raises when no user name can be found at all
        return "cli"


def add_actor_argument(parser: CommandParser) -> None:
    parser.add_argument(
        "--actor", default=None, help="name recorded in the audit log (default: $USER)"
    )


def actor_from(options: dict[str, Any]) -> Actor:
    name = (options.get("actor") or default_actor_name()).strip() or "cli"
    return Actor(name[:150], "cli")


def add_filter_arguments(
    parser: CommandParser, *, receipt_ids: bool = True, reason_flag: bool = True
) -> None:
    """Add the filter flags. ``reason_flag=False`` leaves ``--reason`` free for a command
    whose own reason is the audit note (requeue); ``--reason-contains`` always filters."""
    group = parser.add_argument_group("receipt filters (the same as the API and console)")
    group.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any API filter parameter, e.g. --filter status=repair_failed (repeatable)",
    )
    for field in RECEIPT_FILTER_FIELDS:
        param, flags = field.param, [field.flag]
        if param == "receipt_id" and not receipt_ids:
            continue
        if param == "reason":
            flags = ["--reason-contains", field.flag] if reason_flag else ["--reason-contains"]
        if param in _MULTI:
            group.add_argument(
                *flags, dest=f"f_{param}", action="append", default=[], help=field.help
            )
        else:
            group.add_argument(*flags, dest=f"f_{param}", default=None, help=field.help)


def filter_params(options: dict[str, Any]) -> dict[str, Any]:
    """The filter as API query parameters: ``--filter k=v`` first, explicit flags on top."""
    params: dict[str, Any] = {}
    for item in options.get("filter") or []:
        key, sep, value = str(item).partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise CommandError(f"--filter expects KEY=VALUE, got {item!r}")
        if key in _MULTI:
            params.setdefault(key, []).append(value)
        else:
            params[key] = value
    for param in (f.param for f in RECEIPT_FILTER_FIELDS):
        given = options.get(f"f_{param}")
        if param in _MULTI:
            if given:
                params.setdefault(param, []).extend(given)
        elif given is not None:
            params[param] = given
    # Dates (ISO 8601 or epoch ms) are parsed by ReceiptFilter.from_params, as for the API.
    return params


def unknown_filter_keys(params: dict[str, Any], allowed: tuple[str, ...]) -> list[str]:
    return sorted(set(params) - set(allowed))


class ProgressBar:
    """A progress bar on stderr: redrawn in place on a terminal, one line per stage otherwise."""

    WIDTH = 30

    def __init__(self, stream: IO[str] | None = None, *, enabled: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._stage: str | None = None
        self._finished: set[str] = set()

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        if stage != self._stage and self._stage is not None and self.tty:
            self.stream.write("\n")
        self._stage = stage
        finished = done >= total
        if not self.tty and (not finished or stage in self._finished):
            return
        if finished:
            self._finished.add(stage)
        filled = self.WIDTH if total <= 0 else int(self.WIDTH * min(done, total) / total)
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        line = f"{stage:<20} [{bar}] {done}/{total}"
        self.stream.write(("\r" + line) if self.tty else line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty and self._stage is not None:
            self.stream.write("\n")
            self.stream.flush()


def raw_stream(wrapper: Any) -> IO[str]:
    """The stream under a command's ``OutputWrapper`` (which appends newlines on write)."""
    return cast(IO[str], getattr(wrapper, "_out", wrapper))


def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    with cli_errors():
        return fn(*args, **kwargs)
