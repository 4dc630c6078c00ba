"""Settings, driven entirely by the environment (and ``.env`` when present).

Embedded default: SQLite in WAL mode under ``var/`` and a Celery broker in a second SQLite
file there, so a fresh machine runs web, worker and beat with no server at all.
Scale-out: set ``DATABASE_URL`` (PostgreSQL) and ``CELERY_BROKER_URL`` (Redis or RabbitMQ).
Every setting is listed in ``.env.example``. Importing this module creates no directory:
``opensquilla_site.runtime.ensure_runtime_dirs()`` does, in the processes that need them.
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from opensquilla_site.runtime import load_env_file
from receipts_app import task_limits

from . import serving

BASE_DIR = Path(__file__).resolve().parent.parent
# ``make run`` writes the embedded default's workspaces there, so ``manage.py`` run by hand
# gets the same settings. Real environment variables win over the file.
load_env_file(BASE_DIR)
VAR_DIR = Path(os.environ.get("OPENSQUILLA_VAR_DIR", BASE_DIR / "var")).resolve()


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DEBUG = env_bool("DJANGO_DEBUG", False)
# Development convenience only: production settings refuse to start without a real secret.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    if env_bool("DJANGO_PRODUCTION", False):
        raise RuntimeError("DJANGO_SECRET_KEY must be set when DJANGO_PRODUCTION is on")
    SECRET_KEY = "insecure-dev-key-set-DJANGO_SECRET_KEY-in-production"  # noqa: S105
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django_htmx",
    # {% partialdef %}: a page template names its fragments, and an htmx request renders
    # just the one it targets (receipts_app.console.helpers.render_page).
    "template_partials",
    "csp",
    "ninja",
    "opensquilla_site",
    "sessions_app",
    "receipts_app",
    "receipts_app.mirror",
    "operations_app",
]

MIDDLEWARE = [
    # Outermost: every response, whoever answered it, leaves with the same security headers.
    "opensquilla_site.headers.SecurityHeadersMiddleware",
    # Next: /healthz and /readyz answer before the host check and the HTTPS redirect.
    "operations_app.probe_views.ProbeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Every error under /api/ leaves as JSON, whichever middleware or view below produced it.
    "opensquilla_site.api_http.ApiJsonErrorsMiddleware",
    "opensquilla_site.api_http.ChunkedBodyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # After auth, so a refused page can render the console's own error page.
    "opensquilla_site.middleware.RejectNulMiddleware",
    # After auth too: a bare 405 from a view's method check becomes a console page.
    "opensquilla_site.console_http.ConsoleErrorPagesMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last: runs a console page inside the gateway its ?gateway= names.
    "receipts_app.console.middleware.ConsoleGatewayMiddleware",
]

ROOT_URLCONF = "opensquilla_site.urls"
WSGI_APPLICATION = "opensquilla_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
            # The console keeps its template tags beside its views (receipts_app/console/).
            "libraries": {
                "console": "receipts_app.console.templatetags",
                "mirror": "receipts_app.mirror.templatetags",
            },
        },
    },
]

# --- Database -------------------------------------------------------------------------
DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{VAR_DIR / 'opensquilla.sqlite3'}"),
        # Kept connections: every web worker process and every Celery worker child holds one
        # connection and reuses it for this many seconds (a fresh PostgreSQL connection costs
        # ~5 ms, more than a whole upsert). 0 closes it after each request/task.
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "600")),
        # A reused connection is tested first, so a database restart costs a reconnect, not a
        # failed request.
        conn_health_checks=True,
    )
}
# SQLite durability. FULL (the default, as SQLite's own and OpenSquilla's): a commit returns
# once the WAL is synced, so a receipt survives a power cut. NORMAL syncs only at checkpoints:
# faster, and a power cut (not a crash of the process) can lose the last commits. Choose NORMAL
# only where that loss is acceptable (docs/PERFORMANCE.md).
SQLITE_SYNCHRONOUS = os.environ.get("OPENSQUILLA_SQLITE_SYNCHRONOUS", "FULL").upper()
if SQLITE_SYNCHRONOUS not in {"FULL", "NORMAL", "EXTRA"}:
    raise ImproperlyConfigured("OPENSQUILLA_SQLITE_SYNCHRONOUS must be FULL, NORMAL or EXTRA")
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            # IMMEDIATE takes the write lock at BEGIN, so the generation fence and the write
            # it guards cannot interleave with another writer (SQLite has no SELECT FOR UPDATE).
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": (
                f"PRAGMA journal_mode=WAL; PRAGMA synchronous={SQLITE_SYNCHRONOUS}; "
                "PRAGMA busy_timeout=30000;"
            ),
        }
    )
    # A file-backed test database lets a real Celery worker process share it with the tests;
    # the pid keeps concurrent test runs on one machine from sharing (and corrupting) it.
    DATABASES["default"]["TEST"] = {
        "NAME": str(VAR_DIR / f"test_opensquilla_{os.getpid()}.sqlite3")
    }

# PostgreSQL's JIT compiles any plan whose estimated cost passes jit_above_cost. Every query
# here is OLTP-sized, so it only ever adds latency: the overview's one health statement (a few
# dozen index probes, 0.1 s to run) spent 2.9 s compiling 1,160 functions at 5M receipts
# (bench/fleet_view.py). OPENSQUILLA_PG_JIT=on leaves the server's setting (e.g. behind a
# pooler that refuses startup options).
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    if os.environ.get("OPENSQUILLA_PG_JIT", "off").lower() != "on":
        pg_options = DATABASES["default"].setdefault("OPTIONS", {})
        pg_options["options"] = f"{pg_options.get('options', '')} -c jit=off".strip()

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Permissions in one query per request (opensquilla_site/permission_backend.py).
AUTHENTICATION_BACKENDS = ["opensquilla_site.permission_backend.OneQueryModelBackend"]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Files a browser asks for at the site root (``/favicon.ico``), served by WhiteNoise.
WHITENOISE_ROOT = BASE_DIR / "static" / "root"
STATIC_ROOT = VAR_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# --- OpenSquilla domain ----------------------------------------------------------------
# No silent default: an unset workspace makes checkpoints fail with a recorded receipt
# (docs/UPSTREAM.md#recording-a-checkpoint), exactly like upstream's unconfigured SessionManager.
OPENSQUILLA_CHECKPOINT_WORKSPACE = os.environ.get("OPENSQUILLA_CHECKPOINT_WORKSPACE") or None
# Raw-fallback archives and memory notes live under each agent's memory workspace.
# "{agent}" is replaced by the normalised agent id.
OPENSQUILLA_MEMORY_WORKSPACE = os.environ.get("OPENSQUILLA_MEMORY_WORKSPACE") or None
# Agents the repair tick always scans, comma-separated (docs/WORKERS.md); ``main`` always is.
OPENSQUILLA_AGENTS = [a for a in os.environ.get("OPENSQUILLA_AGENTS", "").split(",") if a.strip()]
OPENSQUILLA_FLUSH_PROVIDER = os.environ.get("OPENSQUILLA_FLUSH_PROVIDER", "none")
OPENSQUILLA_FLUSH_BASE_URL = os.environ.get("OPENSQUILLA_FLUSH_BASE_URL", "")
OPENSQUILLA_FLUSH_API_KEY = os.environ.get("OPENSQUILLA_FLUSH_API_KEY", "")
OPENSQUILLA_FLUSH_MODEL = os.environ.get("OPENSQUILLA_FLUSH_MODEL", "")
OPENSQUILLA_FLUSH_TIMEOUT = float(os.environ.get("OPENSQUILLA_FLUSH_TIMEOUT", "120"))
# Upstream's privacy switch: flushes send the provider no request correlation (docs/WORKERS.md).
OPENSQUILLA_PRIVACY_DISABLE_NETWORK_OBSERVABILITY = env_bool(
    "OPENSQUILLA_PRIVACY_DISABLE_NETWORK_OBSERVABILITY"
)
OPENSQUILLA_REPAIR_INTERVAL_SECONDS = float(
    os.environ.get("OPENSQUILLA_REPAIR_INTERVAL_SECONDS", "60")
)
OPENSQUILLA_REPAIR_MAX_ITEMS_PER_TICK = int(
    os.environ.get("OPENSQUILLA_REPAIR_MAX_ITEMS_PER_TICK", "5")
)
# The ?wait=true limit; gunicorn's timeout is derived from it in serving.py (WEB_TIMEOUT).
OPENSQUILLA_CHECKPOINT_TIMEOUT = serving.WAIT_LIMIT_SECONDS
# Live mirror of a running gateway's <state_dir>/sessions.db (docs/MIRROR.md): unset, the
# Procfile's mirror process idles.
OPENSQUILLA_SOURCE_DB = os.environ.get("OPENSQUILLA_SOURCE_DB") or None
OPENSQUILLA_SOURCE_WORKSPACE = os.environ.get("OPENSQUILLA_SOURCE_WORKSPACE") or None
# More gateways, each under its own name: "NAME=DB[:WORKSPACE] NAME=DB[:WORKSPACE] …"
# (receipts_app.mirror.sources parses it; OPENSQUILLA_SOURCE_DB above is the gateway "local").
OPENSQUILLA_SOURCES = os.environ.get("OPENSQUILLA_SOURCES") or None
OPENSQUILLA_MIRROR_INTERVAL = float(os.environ.get("OPENSQUILLA_MIRROR_INTERVAL", "0.5"))
# The gateway whose workspaces this host's worker was given (docs/OPERATIONS.md, "Edge
# deployment"): a worker refuses the rows of any other gateway. Unset: ``local``, the central
# process set. A gateway's work goes to the queue PREFIX + NAME (default ``gateway.NAME``).
OPENSQUILLA_GATEWAY = os.environ.get("OPENSQUILLA_GATEWAY") or "local"
OPENSQUILLA_GATEWAY_QUEUE_PREFIX = os.environ.get("OPENSQUILLA_GATEWAY_QUEUE_PREFIX") or "gateway."

# --- Celery ----------------------------------------------------------------------------
# The embedded broker is kombu's SQLAlchemy transport on a SQLite file under var/
# (opensquilla_site/embedded_broker.py): a message is a row, written and taken in one
# transaction each, so no reader ever sees half a message. No server, safe across processes.
# Seconds a publish may wait to reach the broker (connect; see the retry policy below).
PUBLISH_TIMEOUT_SECONDS = float(os.environ.get("OPENSQUILLA_PUBLISH_TIMEOUT", "1"))
CELERY_BROKER_URL = os.environ.get(
    "CELERY_BROKER_URL", f"sqlite:///{VAR_DIR / 'celery-broker.sqlite3'}"
)
_EMBEDDED_BROKER = CELERY_BROKER_URL.startswith("sqlite://")
if _EMBEDDED_BROKER:
    # Passed to SQLAlchemy's create_engine: wait this long for the file's write lock.
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {"connect_args": {"timeout": 5}}
else:
    # Redis redelivers a killed worker's unacknowledged task after this (derived from the
    # tasks' time limits; RabbitMQ redelivers when the connection drops and ignores it).
    # An unreachable Redis fails a connect, and one that accepts but never answers fails a
    # command, within PUBLISH_TIMEOUT_SECONDS (the worker's BRPOP runs on its event loop, not
    # under this timeout).
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": task_limits.VISIBILITY_TIMEOUT_SECONDS,
        "socket_connect_timeout": PUBLISH_TIMEOUT_SECONDS,
        "socket_timeout": PUBLISH_TIMEOUT_SECONDS,
    }
# A publish never waits long on an unreachable broker: one connect of at most
# PUBLISH_TIMEOUT_SECONDS, one quick retry, then it fails; the work is already in the outbox
# (receipts_app/enqueue.py) and the lost-work sweep sends it when the broker is back.
CELERY_BROKER_CONNECTION_TIMEOUT = PUBLISH_TIMEOUT_SECONDS
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.2,
}
# The same bound for a Redis result backend (Celery's default retries for ~20 s).
CELERY_REDIS_SOCKET_CONNECT_TIMEOUT = PUBLISH_TIMEOUT_SECONDS
CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS = {"retry_policy": CELERY_TASK_PUBLISH_RETRY_POLICY}


# Nothing in the project reads a task's result (a task's effects are ledger rows and audit
# events), so the embedded default keeps none: no results folder to lose or fill. With Redis
# the results go there, for operators' own tools.
def _default_result_backend() -> str | None:
    if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
        return CELERY_BROKER_URL
    return None


CELERY_RESULT_BACKEND = os.environ.get("CELERY_RESULT_BACKEND") or _default_result_backend()
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = task_limits.DEFAULT.soft
CELERY_TASK_TIME_LIMIT = task_limits.DEFAULT.hard
CELERY_RESULT_EXPIRES = 3600
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
# How often beat folds the receipt counts' delta rows and groups newly arrived failures
# (receipts_app/counts.py, receipts_app/failure_groups.py): the overview's failure groups lag
# the ledger by at most this long.
OPENSQUILLA_AGGREGATE_FOLD_SECONDS = float(
    os.environ.get("OPENSQUILLA_AGGREGATE_FOLD_SECONDS", "5")
)
CELERY_BEAT_SCHEDULE = {
    "fold-ledger-aggregates": {
        "task": "receipts_app.tasks.fold_ledger_aggregates",
        "schedule": OPENSQUILLA_AGGREGATE_FOLD_SECONDS,
    },
    # The repair worker's tick also sweeps work whose enqueue was lost (broker down at commit).
    "repair-tick": {
        "task": "receipts_app.tasks.repair_tick",
        "schedule": OPENSQUILLA_REPAIR_INTERVAL_SECONDS,
    },
}

# --- Checkpoint scrub (receipts_app/scrub, docs/OPERATIONS.md "Checkpoint scrub") -----------
# Beat queues every gateway's scrub to the worker that holds its files this often; each run
# goes on for at most OPENSQUILLA_SCRUB_RUN_SECONDS and the next one resumes where it stopped.
OPENSQUILLA_SCRUB_TICK_SECONDS = float(os.environ.get("OPENSQUILLA_SCRUB_TICK_SECONDS", "300"))
# A cycle over every checkpoint starts this often (an unchanged file costs a stat) ...
OPENSQUILLA_SCRUB_CYCLE_SECONDS = float(os.environ.get("OPENSQUILLA_SCRUB_CYCLE_SECONDS", "3600"))
# ... and one that reads every file in full, changed or not, this often.
OPENSQUILLA_SCRUB_FULL_CYCLE_SECONDS = float(
    os.environ.get("OPENSQUILLA_SCRUB_FULL_CYCLE_SECONDS", "86400")
)
# The most a scrub reads per second (0: unthrottled).
OPENSQUILLA_SCRUB_READ_BYTES_PER_SECOND = float(
    os.environ.get("OPENSQUILLA_SCRUB_READ_BYTES_PER_SECOND", str(20 * 1024 * 1024))
)
OPENSQUILLA_SCRUB_RUN_SECONDS = float(os.environ.get("OPENSQUILLA_SCRUB_RUN_SECONDS", "240"))
# Processes an unthrottled scrub reads its files in (0: the worker's own threads only).
OPENSQUILLA_SCRUB_READER_PROCESSES = int(os.environ.get("OPENSQUILLA_SCRUB_READER_PROCESSES", "2"))
CELERY_BEAT_SCHEDULE["scrub-checkpoints"] = {
    "task": "receipts_app.tasks.scrub_tick",
    "schedule": OPENSQUILLA_SCRUB_TICK_SECONDS,
}

# --- Caches and login rate limiting ------------------------------------------------------
# The login limit (opensquilla_site/login_limit.py) needs a cache every web process shares.
# Scale-out uses Redis; the embedded default uses the filesystem under var/, shared by the
# local web workers.
_CACHE_URL = os.environ.get("CACHE_URL") or (
    CELERY_BROKER_URL if CELERY_BROKER_URL.startswith(("redis://", "rediss://")) else ""
)
if _CACHE_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": _CACHE_URL,
        },
    }
else:
    # The filesystem cache's increment is not atomic, so two simultaneous failed logins can be
    # counted once; on one machine that loosens the limit slightly and never disables it.
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(VAR_DIR / "cache"),
        },
    }
# Sliding windows: "N/s|m|h|d", or "N/<k><unit>" ("10/5m").
LOGIN_RATE_PER_IP = os.environ.get("OPENSQUILLA_LOGIN_RATE_PER_IP", "20/m")
LOGIN_RATE_PER_USER = os.environ.get("OPENSQUILLA_LOGIN_RATE_PER_USER", "5/m")
# Behind a reverse proxy: the header it sets with the client's address (see client_ip.py).
OPENSQUILLA_TRUSTED_PROXY_HEADER = os.environ.get("OPENSQUILLA_TRUSTED_PROXY_HEADER", "")

# --- Security (production) --------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the page, not the cookie
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
# Everything (console, admin, the API docs page) is served from this origin: no inline script
# or style, no CDN. Templates keep their JS and CSS in static/ (tests/security/test_headers.py
# checks every template). data: images are the admin's and Swagger UI's icons.
_SELF = "'self'"
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [_SELF],
        "script-src": [_SELF],
        "style-src": [_SELF],
        "img-src": [_SELF, "data:"],
        "font-src": [_SELF],
        "connect-src": [_SELF],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": [_SELF],
        "frame-ancestors": ["'none'"],
    }
}
# The API's docs page and OpenAPI schema: open in development, login or token in production.
OPENSQUILLA_PUBLIC_API_DOCS = env_bool(
    "OPENSQUILLA_PUBLIC_API_DOCS", not env_bool("DJANGO_PRODUCTION", False)
)
if env_bool("DJANGO_PRODUCTION", False):
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = int(os.environ.get("DJANGO_HSTS_SECONDS", "31536000"))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Request bodies over this size are refused before a view sees them (API 413).
DATA_UPLOAD_MAX_MEMORY_SIZE = int(os.environ.get("DJANGO_MAX_BODY_BYTES", str(8 * 1024 * 1024)))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # httpx logs every request's full URL at INFO: alert webhook URLs embed tokens.
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
    },
}

# --- Operations signals (operations_app; docs/OPERATIONS.md) ------------------------------
# Seconds each /readyz probe (database, broker) may take before it counts as failed.
OPENSQUILLA_READYZ_TIMEOUT = float(os.environ.get("OPENSQUILLA_READYZ_TIMEOUT", "2"))
# Networks (CIDR) whose scrapers may read /metrics without a token; empty: a token is required.
OPENSQUILLA_METRICS_ALLOWED_NETWORKS = env_list("OPENSQUILLA_METRICS_ALLOWED_NETWORKS")
# A worker or beat silent this long shows as silent on the liveness page.
OPENSQUILLA_HEARTBEAT_STALE_SECONDS = float(
    os.environ.get("OPENSQUILLA_HEARTBEAT_STALE_SECONDS", "60")
)
# How often a worker or mirror process writes its own heartbeat (operations_app.pulse).
OPENSQUILLA_HEARTBEAT_INTERVAL_SECONDS = float(
    os.environ.get("OPENSQUILLA_HEARTBEAT_INTERVAL_SECONDS", "10")
)
# Alerts: evaluated by beat every interval; webhooks time out after OPENSQUILLA_ALERT_TIMEOUT.
OPENSQUILLA_ALERT_INTERVAL_SECONDS = float(
    os.environ.get("OPENSQUILLA_ALERT_INTERVAL_SECONDS", "30")
)
OPENSQUILLA_ALERT_TIMEOUT = float(os.environ.get("OPENSQUILLA_ALERT_TIMEOUT", "5"))
# Off: webhook targets resolving to private, loopback or link-local addresses are refused.
OPENSQUILLA_ALERT_ALLOW_PRIVATE_TARGETS = env_bool("OPENSQUILLA_ALERT_ALLOW_PRIVATE_TARGETS", False)
CELERY_BEAT_SCHEDULE["evaluate-alerts"] = {
    "task": "operations_app.tasks.evaluate_alerts",
    "schedule": OPENSQUILLA_ALERT_INTERVAL_SECONDS,
}
# How often beat prunes the embedded broker's delivered rows, and updates time at risk.
OPENSQUILLA_BROKER_PRUNE_SECONDS = float(os.environ.get("OPENSQUILLA_BROKER_PRUNE_SECONDS", "3600"))
OPENSQUILLA_TIME_AT_RISK_SECONDS = float(os.environ.get("OPENSQUILLA_TIME_AT_RISK_SECONDS", "60"))
if _EMBEDDED_BROKER:
    CELERY_BEAT_SCHEDULE["prune-embedded-broker"] = {
        "task": "operations_app.tasks.prune_embedded_broker",
        "schedule": OPENSQUILLA_BROKER_PRUNE_SECONDS,
    }
CELERY_BEAT_SCHEDULE["time-at-risk"] = {
    "task": "operations_app.tasks.track_time_at_risk",
    "schedule": OPENSQUILLA_TIME_AT_RISK_SECONDS,
}
# The gateway link (docs/MIRROR.md#gateway-link): NAME=ADDRESS entries (the admin can set
# addresses too); each gateway's token comes from OPENSQUILLA_GATEWAY_TOKEN_<NAME> or the
# variable its rpc_token_env names, never from the database.
OPENSQUILLA_GATEWAY_LINKS = os.environ.get("OPENSQUILLA_GATEWAY_LINKS") or None
# The hosts an address typed in the admin or import_opensquilla may reach, matched as
# ALLOWED_HOSTS is (sessions_app/link_policy.py); the hosts of OPENSQUILLA_GATEWAY_LINKS are
# allowed as well. Empty: only those.
OPENSQUILLA_GATEWAY_LINK_HOSTS = env_list("OPENSQUILLA_GATEWAY_LINK_HOSTS")
# "Run due repairs" is queued work: the worker's call waits at most this long for the answer.
OPENSQUILLA_GATEWAY_REPAIR_TIMEOUT = float(
    os.environ.get("OPENSQUILLA_GATEWAY_REPAIR_TIMEOUT", "20")
)
OPENSQUILLA_GATEWAY_LINK_INTERVAL_SECONDS = float(
    os.environ.get("OPENSQUILLA_GATEWAY_LINK_INTERVAL_SECONDS", "60")
)
OPENSQUILLA_GATEWAY_LINK_TIMEOUT = float(os.environ.get("OPENSQUILLA_GATEWAY_LINK_TIMEOUT", "5"))
CELERY_BEAT_SCHEDULE["read-gateway-links"] = {
    "task": "operations_app.tasks.read_gateway_links",
    "schedule": OPENSQUILLA_GATEWAY_LINK_INTERVAL_SECONDS,
}
# Alert e-mail goes through Django's e-mail backend (SMTP unless EMAIL_BACKEND says otherwise).
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("EMAIL_PORT", "25"))
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = float(os.environ.get("EMAIL_TIMEOUT", "10"))
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "opensquilla@localhost")
