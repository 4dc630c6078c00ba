"""Playwright (sync API) against pytest-django's live server, with Debian's Chromium.

Playwright's sync API runs an event loop in this thread, so Django's async-safety check
would refuse the ORM calls that set up test data; allowing them here is safe because the
loop never runs Django code.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(django_settings.BASE_DIR) / "var" / "screenshots"
PASSWORD = "pw-Secret-123"


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"Chromium not installed at {CHROMIUM}")
    from playwright.sync_api import sync_playwright

    # Only while the browser runs (these tests are ordered last by tests/conftest.py, since the
    # sync API leaves an event loop running in this thread until the session ends).
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser) -> Iterator[Any]:
    """A fresh browser context; every JS dialog is recorded (and dismissed) in ``page.dialogs``."""
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    context.set_default_timeout(15_000)
    tab = context.new_page()
    dialogs: list[str] = []

    def on_dialog(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    tab.on("dialog", on_dialog)
    tab.dialogs = dialogs
    yield tab
    context.close()


@pytest.fixture
def screenshot():
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(page: Any, name: str) -> Path:
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take


def log_in(page: Any, base_url: str, username: str) -> None:
    page.goto(f"{base_url}/accounts/login/")
    page.fill('input[name="username"]', username)
    page.fill('input[name="password"]', PASSWORD)
    page.click('button[type="submit"]')
    page.wait_for_url(f"{base_url}/")
