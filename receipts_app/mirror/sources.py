"""The sources the Procfile's mirror follows: ``OPENSQUILLA_SOURCE_DB`` (the gateway ``local``)
and ``OPENSQUILLA_SOURCES``, ``NAME=DB[:WORKSPACE]`` entries separated by spaces or commas,
each a gateway of its own (docs/MIRROR.md, "Several gateways")."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from sessions_app.gateways import DEFAULT_GATEWAY, GatewayNameError, validate_gateway_name

from ..importer import ImportSourceError


@dataclass(frozen=True)
class ConfiguredSource:
    gateway: str
    db_path: Path
    workspace: Path | None


def parse_sources(text: str) -> list[ConfiguredSource]:
    """``NAME=DB[:WORKSPACE]`` entries; raises ``ImportSourceError`` naming a bad one."""
    out: list[ConfiguredSource] = []
    for entry in (e for e in re.split(r"[\s,]+", text.strip()) if e):
        name, sep, paths = entry.partition("=")
        if not sep or not paths:
            raise ImportSourceError(
                f"OPENSQUILLA_SOURCES entry {entry!r} is not NAME=PATH_TO_sessions.db[:WORKSPACE]"
            )
        try:
            validate_gateway_name(name)
        except GatewayNameError as exc:
            raise ImportSourceError(f"OPENSQUILLA_SOURCES entry {entry!r}: {exc}") from exc
        db, _, workspace = paths.partition(":")
        out.append(ConfiguredSource(name, Path(db), Path(workspace) if workspace else None))
    return _unique(out)


def _unique(sources: list[ConfiguredSource]) -> list[ConfiguredSource]:
    seen: set[str] = set()
    for source in sources:
        if source.gateway in seen:
            raise ImportSourceError(f"gateway {source.gateway!r} is configured twice")
        seen.add(source.gateway)
    return sources


def configured_sources() -> list[ConfiguredSource]:
    """Every configured source, ``local`` (OPENSQUILLA_SOURCE_DB) first."""
    out: list[ConfiguredSource] = []
    single = getattr(settings, "OPENSQUILLA_SOURCE_DB", None)
    if single:
        workspace = getattr(settings, "OPENSQUILLA_SOURCE_WORKSPACE", None)
        out.append(
            ConfiguredSource(DEFAULT_GATEWAY, Path(single), Path(workspace) if workspace else None)
        )
    many = getattr(settings, "OPENSQUILLA_SOURCES", None)
    if many:
        out.extend(parse_sources(many))
    return _unique(out)
