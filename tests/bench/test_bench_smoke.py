"""Every benchmark runs in the suite at a tiny size, so a bench that no longer runs fails here.

Each script in ``bench/`` is run as its user runs it (``.venv/bin/python bench/NAME.py …``, its
own process, the repository as working directory) with arguments that make it finish in
seconds; a non-zero exit (a crash, a figure it can no longer produce) fails the test with the
end of its output. What a bench needs beyond the suite's own database is its marker:
``postgres`` (it makes its own databases on ``BENCH_PG_SERVER``), ``redis`` (its own Redis
database, ``BENCH_REDIS_URL``), ``reference`` (``var/bench/ref-venv``, ``bash
bench/reference_venv.sh``); without the service it skips with the reason, and CI, which may
not skip (``OPENSQUILLA_REQUIRE_SERVICES=1``), fails. They share the suite's serial group:
benches start processes and flush their own Redis database, one at a time.

``test_every_bench_script_has_a_smoke_run`` keeps the list whole: a new ``bench/*.py`` fails
it until it gets an entry in ``SMOKE`` below, or, when its smoke test lives in another file,
in ``SMOKE_ELSEWHERE`` (name -> that test file, which must name the script).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
REF_PYTHON = REPO / "var" / "bench" / "ref-venv" / "bin" / "python"
PG_SERVER = os.environ.get("BENCH_PG_SERVER", "postgres://postgres@127.0.0.1:5432")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")
SMOKE_PG = f"{PG_SERVER}/osq_bench_smoke"

pytestmark = [pytest.mark.bench]


@dataclass(frozen=True)
class Smoke:
    """One tiny run of ``bench/<script>.py``: its arguments and what it needs."""

    script: str
    args: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()  # "postgres", "redis", "reference", "wrk"
    id: str = ""
    # Run with the reference venv's interpreter (the script imports upstream's code).
    reference_python: bool = False
    timeout: float = 240
    env: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.id or self.script


# Helper modules the scripts import: imported here (a broken import fails), not run.
LIBRARIES = ("djbench", "workload")

SMOKE: tuple[Smoke, ...] = (
    Smoke(
        "write_rounds",
        (
            "--sides",
            "raw,after,fsync",
            "--rounds",
            "1",
            "--n",
            "20",
            "--fsync-count",
            "5",
            "--name",
            "smoke_write_rounds",
        ),
    ),
    Smoke(
        "write_rounds",
        (
            "--backend",
            "postgres",
            "--sides",
            "raw,after",
            "--rounds",
            "1",
            "--n",
            "20",
            "--name",
            "smoke_write_rounds_pg",
        ),
        needs=("postgres",),
        id="write_rounds_postgres",
    ),
    Smoke(
        "write_rounds",
        ("--sides", "reference", "--rounds", "1", "--n", "20", "--name", "smoke_write_rounds_ref"),
        needs=("reference",),
        id="write_rounds_reference",
    ),
    Smoke("write_profile", ("--n", "20", "--name", "smoke_write_profile")),
    Smoke(
        "embedded_broker",
        ("--tasks", "20", "--receipts", "5", "--timeout", "120", "--name", "smoke_embedded_broker"),
    ),
    Smoke(
        "gateway_migration",
        ("--backend", "sqlite", "--rows", "200", "--db-name", "smoke_gateway_migration"),
    ),
    Smoke(
        "event_gateway_migration",
        (
            "--backend",
            "sqlite",
            "--receipts",
            "200",
            "--events",
            "500",
            "--db-name",
            "smoke_event_migration",
        ),
    ),
    Smoke(
        "scale",
        (
            "--backend",
            "sqlite",
            "--max-rows",
            "2000",
            "--lookups",
            "10",
            "--page-repeats",
            "1",
            "--db-name",
            "smoke_scale",
        ),
    ),
    Smoke("ledger_ops", ("--backend", "sqlite", "--quick")),
    Smoke("prototype_ledger", ("--backend", "sqlite", "--quick")),
    Smoke(
        "fleet_view",  # at least 4 gateways: the timed one is gw-03 (CHOSEN)
        (
            "--rows",
            "2000",
            "--gateways",
            "4",
            "--repeats",
            "1",
            "--db-name",
            "osq_bench_smoke_fleet",
            "--name",
            "smoke_fleet_view",
        ),
        needs=("postgres",),
    ),
    Smoke("bulk_api", ("--quick", "--batches", "2", "--clients", "1"), needs=("postgres",)),
    Smoke("api_load", ("--quick", "--duration", "1", "--rows", "500"), needs=("postgres", "wrk")),
    Smoke(
        "concurrent_writers",
        (
            "--rounds",
            "1",
            "--seconds",
            "1",
            "--inprocess",
            "20",
            "--name",
            "smoke_concurrent_writers",
        ),
        needs=("postgres", "reference", "wrk"),
    ),
    Smoke(
        "workers", ("--quick", "--sessions", "4", "--timeout", "120"), needs=("postgres", "redis")
    ),
    Smoke("requeue_plan", ("--rows", "50", "--timeout", "120"), needs=("postgres", "redis")),
    Smoke(
        "mirror",
        (
            "--rate",
            "5",
            "--seconds",
            "2",
            "--import-receipts",
            "50",
            "--entries-per-receipt",
            "1",
            "--idle-seconds",
            "1",
        ),
        needs=("reference",),
    ),
    Smoke(
        "mirror_fleet",
        (
            "--gateways",
            "1",
            "--rate",
            "5",
            "--seconds",
            "2",
            "--idle-seconds",
            "1",
            "--database-url",
            f"{PG_SERVER}/osq_bench_smoke_mfleet",
            "--name",
            "smoke_mirror_fleet",
        ),
        needs=("postgres", "reference"),
    ),
    Smoke("reference_ledger", ("--quick",), needs=("reference",), reference_python=True),
    Smoke(
        "make_golden",
        ("--out", "{tmp}/golden", "--compare", "tests/golden"),
        needs=("reference",),
        reference_python=True,
    ),
    Smoke(
        "make_content_golden",
        ("--out", "{tmp}/shapes.json"),
        needs=("reference",),
        reference_python=True,
    ),
    # Needs upstream's source at a later release, which the user supplies
    # (tests/mirror/test_inplace_edits.py runs it when OSQ_UPSTREAM_SRC is set): its usage.
    Smoke("make_golden_head", ("--help",)),
    Smoke("report", ("--check",)),
    Smoke("suite_time", ("--name", "smoke_suite_time", "--", sys.executable, "-c", "pass")),
    Smoke("run_all", ("--only", "write_profile")),
    Smoke(
        "soak_embedded",
        # Load only: too short for a killed process's work to come back (make soak-embedded).
        (
            "--minutes",
            "0.3",
            "--rate",
            "1",
            "--drain-minutes",
            "2",
            "--no-kills",
            "--root",
            "{tmp}/soak",
        ),
        timeout=600,
    ),
)

# Benches whose smoke run lives in another test file: name -> that file (relative to the
# repository). Add a line here when a bench's own test covers it.
SMOKE_ELSEWHERE: dict[str, str] = {
    # mirror_fleet --writer light runs the light writer's processes.
    "light_writer": "tests/bench/test_mirror_fleet_smoke.py",
    "mirror_pass_cost": "tests/mirror/test_pass_cost.py",
    "scrub": "tests/site/test_scrub_bench.py",
}


def _service_missing(need: str) -> str | None:
    if need == "postgres":
        try:
            import psycopg

            psycopg.connect(f"{PG_SERVER}/postgres", connect_timeout=3).close()
        except Exception as exc:  # noqa: BLE001 - any failure to reach it is "missing"
            return f"PostgreSQL at {PG_SERVER} unreachable: {exc}"
    elif need == "redis":
        import redis

        try:
            redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
        except redis.RedisError as exc:
            return f"Redis at {REDIS_URL} unreachable: {exc}"
    elif need == "reference":
        if not REF_PYTHON.exists():
            return f"no reference venv at {REF_PYTHON}: run bash bench/reference_venv.sh"
    elif need == "wrk":
        if shutil.which("wrk") is None:
            return "wrk is not installed (apt-get install wrk)"
    return None


def _marks(smoke: Smoke) -> list[pytest.MarkDecorator]:
    return [getattr(pytest.mark, need) for need in smoke.needs if need != "wrk"]


@pytest.mark.parametrize("smoke", [pytest.param(s, id=s.name, marks=_marks(s)) for s in SMOKE])
def test_the_bench_runs_at_a_tiny_size(smoke: Smoke, tmp_path: Path) -> None:
    for need in smoke.needs:
        missing = _service_missing(need)
        if missing:
            pytest.skip(missing)
    python = str(REF_PYTHON) if smoke.reference_python else sys.executable
    args = [arg.replace("{tmp}", str(tmp_path)) for arg in smoke.args]
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OPENSQUILLA_ENV_FILE": "",
        "BENCH_PG_SERVER": PG_SERVER,
        "BENCH_REDIS_URL": REDIS_URL,
        **smoke.env,
    }
    # The suite's own database and broker are not the bench's.
    for name in (
        "DATABASE_URL",
        "CELERY_BROKER_URL",
        "CELERY_RESULT_BACKEND",
        "CELERY_TASK_ALWAYS_EAGER",
        "DJANGO_SETTINGS_MODULE",
    ):
        env.pop(name, None)
    done = subprocess.run(
        [python, str(BENCH / f"{smoke.script}.py"), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=smoke.timeout,
    )
    output = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, f"bench/{smoke.script}.py exited {done.returncode}:\n{output}"


@pytest.mark.parametrize("library", LIBRARIES)
def test_the_bench_helpers_import(library: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, 'bench'); import {library}"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_every_bench_script_has_a_smoke_run() -> None:
    scripts = {path.stem for path in BENCH.glob("*.py")}
    covered = {smoke.script for smoke in SMOKE} | set(LIBRARIES)
    for name, test_file in SMOKE_ELSEWHERE.items():
        text = (REPO / test_file).read_text(encoding="utf-8")
        assert f"{name}.py" in text or f"bench.{name}" in text, (
            f"{test_file} is listed as bench/{name}.py's smoke test but never names it"
        )
        covered.add(name)
    missing = sorted(scripts - covered)
    assert not missing, (
        f"bench scripts without a smoke run: {missing}; add a tiny-size entry to SMOKE in "
        f"{Path(__file__).relative_to(REPO)} (or name its own test in SMOKE_ELSEWHERE)"
    )
