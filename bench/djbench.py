"""Helpers for the benchmarks that run our code: databases, Django setup, bulk seeding, and
the Celery worker and gunicorn subprocesses.

Each benchmark works in its own database (a SQLite file under ``var/bench`` or a PostgreSQL
database named ``opensquilla_bench*``) so a run never touches the development or test data,
and every subprocess it starts is stopped by its pid when the benchmark ends.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import workload as wl

ROOT = wl.ROOT
VENV_BIN = ROOT / ".venv" / "bin"
PG_SERVER = os.environ.get("BENCH_PG_SERVER", "postgres://postgres@127.0.0.1:5432")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")
TABLE = "receipts_app_memorydurablereceipt"
SEED_COLUMNS = (*wl.RECEIPT_COLUMNS, "agent_id", "resolved_by_receipt_id")


def pg_url(db_name: str) -> str:
    return f"{PG_SERVER}/{db_name}"


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def base_env(database_url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="opensquilla_site.settings",
        DATABASE_URL=database_url,
        CELERY_BROKER_URL=REDIS_URL,
        OPENSQUILLA_CHECKPOINT_WORKSPACE=str(wl.RESULTS_DIR / "workspace"),
        OPENSQUILLA_MEMORY_WORKSPACE=str(wl.RESULTS_DIR / "workspace"),
    )
    env.update(extra)
    return env


def recreate_pg_database(db_name: str) -> None:
    import psycopg

    with psycopg.connect(pg_url("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{db_name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{db_name}"')


def fresh_sqlite(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def migrate(database_url: str) -> None:
    subprocess.run(
        [str(VENV_BIN / "python"), "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=ROOT,
        env=base_env(database_url),
        check=True,
    )


def fresh_database(backend: str, name: str) -> str:
    """Create and migrate an empty database; returns its DATABASE_URL."""
    if backend == "postgres":
        recreate_pg_database(name)
        url = pg_url(name)
    else:
        path = wl.RESULTS_DIR / f"{name}.sqlite3"
        wl.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        fresh_sqlite(path)
        url = sqlite_url(path)
    migrate(url)
    return url


def setup_django(database_url: str) -> None:
    """Configure Django in this process for ``database_url`` (once per process)."""
    os.environ.update(base_env(database_url))
    for p in (str(ROOT), str(ROOT / "bench")):
        if p not in sys.path:
            sys.path.insert(0, p)
    import django

    django.setup()


def versions() -> dict[str, Any]:
    import django
    from django.db import connection

    out: dict[str, Any] = {"django": django.get_version(), "db_vendor": connection.vendor}
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute("SHOW server_version")
            out["postgresql"] = cur.fetchone()[0]
        else:
            cur.execute("select sqlite_version()")
            out["sqlite"] = cur.fetchone()[0]
    return out


def seed_tuple(row: dict) -> tuple:
    from sessions_app.keys import agent_id_for_session_key

    return (
        *(row[c] for c in wl.RECEIPT_COLUMNS),
        agent_id_for_session_key(row["session_key"]) or "",
        None,
    )


def bulk_seed(rows: Iterable[dict], *, batch: int = 20_000) -> int:
    """Insert rows straight into the ledger table: COPY on PostgreSQL, executemany on SQLite.

    Seeding is set-up, not a measured operation: it bypasses the ledger on purpose.
    """
    from django.db import connection, transaction

    count = 0
    columns = SEED_COLUMNS
    with connection.cursor() as cur:
        names = {c.name for c in connection.introspection.get_table_description(cur, TABLE)}
    if "gateway_id" in names:
        # A ledger past the gateway migrations (gateway_migration.py seeds one before them):
        # every seeded row is local's unless the row names its gateway.
        columns = (*SEED_COLUMNS, "gateway_id")
        rows = ({"gateway_id": "local", **row} for row in rows)
    cols = ", ".join(columns)

    def seed_row(row: dict) -> tuple:
        base = seed_tuple(row)
        return (*base, row["gateway_id"]) if len(columns) > len(SEED_COLUMNS) else base

    if connection.vendor == "postgresql":
        with transaction.atomic(), connection.cursor() as cur:
            raw = cur.cursor  # the psycopg cursor under Django's wrapper
            with raw.copy(f"COPY {TABLE} ({cols}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(seed_row(row))
                    count += 1
        with connection.cursor() as cur:
            cur.execute(f"ANALYZE {TABLE}")
        return count
    marks = ", ".join("%s" for _ in columns)
    sql = f"INSERT INTO {TABLE} ({cols}) VALUES ({marks})"
    with connection.cursor() as cur:
        # A page cache that holds the indexes being filled: set-up speed only (the default
        # 2 MB makes every row of a million-row seed miss on a dozen random-key b-trees).
        cur.execute("PRAGMA cache_size = -1000000")
    with transaction.atomic(), connection.cursor() as cur:
        pending: list[tuple] = []
        for row in rows:
            pending.append(seed_row(row))
            if len(pending) >= batch:
                cur.executemany(sql, pending)
                count += len(pending)
                pending.clear()
        if pending:
            cur.executemany(sql, pending)
            count += len(pending)
    with connection.cursor() as cur:
        cur.execute("PRAGMA cache_size = -2000")  # back to SQLite's default for what is timed
    return count


def flush_redis() -> None:
    """Empty the benchmark's own Redis database (db 14 by default), never another one."""
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()


def redis_queue_length(queue: str = "celery") -> int:
    import redis

    return int(redis.Redis.from_url(REDIS_URL).llen(queue))


class Processes:
    """Subprocesses started by one benchmark, each stopped by its own pid at the end."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
        log.parent.mkdir(parents=True, exist_ok=True)
        handle = open(log, "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            args,
            cwd=ROOT,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        proc._bench_log = handle  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen, timeout: float = 20) -> None:
        if proc.poll() is None:
            # Its own process group: the prefork children of this worker, and nothing else.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        proc._bench_log.close()  # type: ignore[attr-defined]

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            self.stop(proc)
        self.procs.clear()


@contextlib.contextmanager
def running(procs: Processes | None = None) -> Iterator[Processes]:
    procs = procs or Processes()
    try:
        yield procs
    finally:
        procs.stop_all()


def start_workers(
    procs: Processes, database_url: str, count: int, *, tag: str, concurrency: int = 1
) -> list[subprocess.Popen]:
    """``count`` Celery worker processes on Redis, each ``--concurrency`` prefork children."""
    out = []
    for n in range(count):
        args = [
            str(VENV_BIN / "celery"),
            "-A",
            "opensquilla_site",
            "worker",
            "--loglevel",
            "WARNING",
            "--concurrency",
            str(concurrency),
            "-n",
            f"bench-{tag}-{n}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        out.append(
            procs.start(
                args, base_env(database_url), wl.RESULTS_DIR / "logs" / f"{tag}-worker{n}.log"
            )
        )
    return out


def wait_workers_ready(count: int, timeout: float = 60) -> None:
    from opensquilla_site.celery import app

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        replies = app.control.ping(timeout=1.0) or []
        if len(replies) >= count:
            return
    raise RuntimeError(f"only {len(replies)} of {count} Celery workers answered within {timeout}s")


def start_gunicorn(
    procs: Processes, database_url: str, port: int, *, workers: int = 2, tag: str
) -> subprocess.Popen:
    args = [
        str(VENV_BIN / "gunicorn"),
        "opensquilla_site.wsgi",
        "-b",
        f"127.0.0.1:{port}",
        "-w",
        str(workers),
        "--timeout",
        "120",
        "--log-level",
        "warning",
    ]
    proc = procs.start(
        args, base_env(database_url), wl.RESULTS_DIR / "logs" / f"{tag}-gunicorn.log"
    )
    wait_http(f"http://127.0.0.1:{port}/accounts/login/")
    return proc


def wait_http(url: str, timeout: float = 30) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code < 500:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {timeout}s")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_admin(username: str = "bench-admin") -> Any:
    from django.contrib.auth import get_user_model

    user_model = get_user_model()
    user, _ = user_model.objects.get_or_create(
        username=username, defaults={"is_staff": True, "is_superuser": True}
    )
    if not user.is_superuser:
        user.is_staff = user.is_superuser = True
        user.save()
    return user


def quiet_call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args, **kwargs)


def emit(line: str) -> None:
    print(line, flush=True)
