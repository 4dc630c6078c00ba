"""The one NinjaAPI at /api/v1/. Routers live in each app's ``api.py``."""

from __future__ import annotations

from ninja import NinjaAPI

api = NinjaAPI(
    title="opensquilla-site",
    version="1",
    urls_namespace="api",
    docs_url="/docs",
)
