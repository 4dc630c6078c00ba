"""Production settings, secrets and tokens at rest.

- ``manage.py check --deploy`` is clean (no warning) under the production environment.
- Production refuses to start without ``DJANGO_SECRET_KEY``.
- API tokens are stored as digests: the plaintext appears in no column of any table.
- No secret-looking literal sits in the settings or the product code.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import string
import subprocess
import sys
from pathlib import Path

import pytest
from django.apps import apps
from django.db import connection, models

from opensquilla_site.models import ApiToken
from opensquilla_site.tokens import create_api_token
from tests.factories import make_user

REPO = Path(__file__).resolve().parents[2]
SETTINGS_FILE = REPO / "opensquilla_site" / "settings.py"
PRODUCT_PACKAGES = ("opensquilla_site", "receipts_app", "sessions_app")
# The one literal the settings may hold: the development fallback, refused in production.
DEV_FALLBACK_KEY = "insecure-dev-key-set-DJANGO_SECRET_KEY-in-production"


def random_secret(length: int = 50) -> str:
    alphabet = string.ascii_letters + string.digits + "!@#%^&*(-_=+)"
    return "".join(secrets.choice(alphabet) for _ in range(length))


def manage(args: list[str], tmp_path: Path, **env_overrides: str | None):
    env = dict(os.environ)
    # A private var/ so the check never touches the developer's database or broker folders.
    env["OPENSQUILLA_VAR_DIR"] = str(tmp_path / "var")
    for name, value in env_overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return subprocess.run(  # noqa: S603 - fixed argv, our own interpreter
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


PRODUCTION = {
    "DJANGO_PRODUCTION": "1",
    "DJANGO_ALLOWED_HOSTS": "example.com",
    "DJANGO_DEBUG": None,
}


# The two ways the product is deployed. Neither needs the services running: the checks only
# read settings. (Found by this suite: the scale-out cache tripped django_ratelimit.W001;
# fixed in 9faf356.)
EMBEDDED = {"DATABASE_URL": None, "CELERY_BROKER_URL": None, "CACHE_URL": None}
SCALE_OUT = {
    "DATABASE_URL": "postgres://osq@db.example.com:5432/opensquilla",
    "CELERY_BROKER_URL": "redis://redis.example.com:6379/0",
    "CACHE_URL": None,  # the cache follows the Redis broker
}


@pytest.mark.parametrize(
    "deployment",
    [
        pytest.param(EMBEDDED, id="embedded"),
        pytest.param(SCALE_OUT, id="scale-out"),
    ],
)
def test_check_deploy_is_clean_under_production_settings(deployment, tmp_path):
    result = manage(
        ["check", "--deploy", "--fail-level", "WARNING"],
        tmp_path,
        DJANGO_SECRET_KEY=random_secret(),
        **PRODUCTION,
        **deployment,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_really_runs_the_production_checks(tmp_path):
    """A weak key must fail the same command, or the clean run above proves nothing."""
    result = manage(
        ["check", "--deploy", "--fail-level", "WARNING"],
        tmp_path,
        DJANGO_SECRET_KEY="short",
        **PRODUCTION,
    )
    assert result.returncode != 0
    assert "security.W009" in result.stdout + result.stderr


def test_production_refuses_to_start_without_a_secret_key(tmp_path):
    result = manage(["check"], tmp_path, DJANGO_SECRET_KEY=None, **PRODUCTION)
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set" in result.stderr


def _text_columns() -> list[tuple[str, str]]:
    """(table, column) for every text-like column of every installed model."""
    found = []
    for model in apps.get_models():
        for field in model._meta.concrete_fields:
            if isinstance(field, models.CharField | models.TextField | models.JSONField):
                found.append((model._meta.db_table, field.column))
    return found


def _tables_holding(needle: str) -> list[str]:
    hits = []
    with connection.cursor() as cursor:
        for table, column in _text_columns():
            qn = connection.ops.quote_name
            cast = "TEXT" if connection.vendor != "postgresql" else "text"
            cursor.execute(
                f"SELECT COUNT(*) FROM {qn(table)} "  # noqa: S608 - names from the model registry
                f"WHERE CAST({qn(column)} AS {cast}) LIKE %s",
                [f"%{needle}%"],
            )
            if cursor.fetchone()[0]:
                hits.append(f"{table}.{column}")
    return hits


@pytest.mark.django_db
def test_api_tokens_are_hashed_at_rest():
    user = make_user("keeper", "admin")
    token, plaintext = create_api_token(user=user, name="ci", scope="operate")
    secret = plaintext.split("_", 2)[2]

    row = ApiToken.objects.values().get(pk=token.pk)
    assert row["digest"] == hashlib.sha256(secret.encode()).hexdigest()
    assert not any(secret in str(value) for value in row.values())
    assert _tables_holding(secret) == []


@pytest.mark.django_db
def test_a_token_created_through_the_api_with_an_idempotency_key_is_not_stored_in_clear(
    client,
):
    """Found by this suite: a stored Idempotency-Key replay kept the plaintext secret
    (fixed in f80d5ce: token creation is never replayed)."""
    user = make_user("keeper", "admin")
    _token, admin_plaintext = create_api_token(user=user, name="boot", scope="admin")
    response = client.post(
        "/api/v1/tokens",
        {"name": "script", "scope": "read"},
        content_type="application/json",
        headers={"Authorization": f"Bearer {admin_plaintext}", "Idempotency-Key": "mint-1"},
    )
    assert response.status_code == 201
    secret = response.json()["token"].split("_", 2)[2]
    assert _tables_holding(secret) == []


SECRET_PATTERNS = [
    # name = "literal" where the name says it is a secret
    re.compile(
        r"""(?ix)(secret|password|passwd|api_?key|token|private_?key)\w*\s*[:=]\s*
        (?:[rbuf]?["'])([^"'\s]{8,})["']"""
    ),
    re.compile(r"sk-[A-Za-z0-9]{20,}"),  # OpenAI-style keys
    re.compile(r"AKIA[0-9A-Z]{16}"),  # AWS access keys
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    re.compile(r"osq_[0-9a-f]{8}_[A-Za-z0-9_-]{20,}"),  # one of our own API tokens
    re.compile(r"(?i)(postgres(?:ql)?|redis|amqp)://[^/\s:@'\"]+:[^@\s'\"]+@"),  # URL password
]


def _literals_found(path: Path) -> list[str]:
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if DEV_FALLBACK_KEY in line:
            continue
        for pattern in SECRET_PATTERNS:
            match = pattern.search(line)
            if match:
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    return found


def test_no_secret_literal_in_settings_or_product_code():
    files = [SETTINGS_FILE]
    for package in PRODUCT_PACKAGES:
        files += [p for p in (REPO / package).rglob("*.py") if "migrations" not in p.parts]
    found = [hit for path in sorted(set(files)) for hit in _literals_found(path)]
    assert found == [], "secret-looking literals:\n" + "\n".join(found)


def test_every_secret_setting_comes_from_the_environment():
    text = SETTINGS_FILE.read_text(encoding="utf-8")
    for name in ("DJANGO_SECRET_KEY", "DATABASE_URL", "OPENSQUILLA_FLUSH_API_KEY", "CACHE_URL"):
        assert f'os.environ.get("{name}"' in text, name
    # The only SECRET_KEY literal is the development fallback, behind the production guard.
    assigned = re.findall(r'SECRET_KEY\s*=\s*"([^"]*)"', text)
    assert assigned == [DEV_FALLBACK_KEY]
    guard = text.index("DJANGO_SECRET_KEY must be set")
    assert guard < text.index(DEV_FALLBACK_KEY)


def test_the_secret_pattern_scan_catches_a_planted_key(tmp_path, monkeypatch):
    """The scanner itself works: a planted literal is reported."""
    planted = tmp_path / "planted.py"
    planted.write_text('API_KEY = "abcdef0123456789abcdef"\nDB = "postgres://u:hunter2@db/x"\n')
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert len(_literals_found(planted)) == 2
