"""Writes docs/PERFORMANCE.md from var/bench/*.json (placeholder, replaced below)."""

from pathlib import Path


def write(runs):
    return Path("docs/PERFORMANCE.md")
