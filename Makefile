# One entry point per job. `make run` and `make test` are the README's two commands.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The embedded default configures its workspaces explicitly (settings have no silent default):
# `make run` / `make demo` write them to .env on first run, which settings (so `manage.py` by
# hand), honcho and every process read. The test suite never reads .env.
RUN_WORKSPACE ?= $(CURDIR)/var/workspace

.PHONY: install system-deps migrate prepare-run run run-edge demo test lint typecheck pytest bench bench-writes bench-report soak soak-embedded clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install --quiet -e ".[dev]"

# Debian's Chromium for the browser tests (Playwright cannot download browsers here), and wrk
# for the API load benches (run at a tiny size by tests/bench).
system-deps:
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = "0" ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium missing: run 'sudo apt-get install chromium' (browser tests will skip)"; fi; \
	fi
	@if ! command -v wrk >/dev/null; then \
	  if [ "$$(id -u)" = "0" ]; then \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null; \
	  else echo "wrk missing: run 'sudo apt-get install wrk' (the API load benches' smoke runs skip)"; fi; \
	fi

migrate: install
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py collectstatic --noinput --verbosity 0

# Written once, never overwritten: edit it (see .env.example); real environment variables win.
.env:
	@printf '%s\n' \
	  "# Written by 'make run' on first run (git-ignored). Every setting: .env.example." \
	  "# Real environment variables win over this file; the test suite never reads it." \
	  "OPENSQUILLA_CHECKPOINT_WORKSPACE=$(RUN_WORKSPACE)" \
	  "OPENSQUILLA_MEMORY_WORKSPACE=$(RUN_WORKSPACE)" > $@
	@echo "wrote .env (checkpoint and memory workspace: $(RUN_WORKSPACE))"

demo: .env migrate
	mkdir -p "$(RUN_WORKSPACE)"
	$(BIN)/python manage.py seed_demo

# Migrations and static files, and the demo data only into a database this run created for
# the embedded default (a fresh clone): never into DATABASE_URL's, nor one that existed before.
prepare-run: .env install
	mkdir -p "$(RUN_WORKSPACE)"
	$(BIN)/python manage.py prepare_run

# Web (gunicorn), Celery worker, beat and the mirror together on the embedded default (SQLite,
# and the SQLite broker in var/celery-broker.sqlite3). WEB_BIND=host:port moves the web server
# (default 127.0.0.1:8000). A process that dies is started again with a backoff while the others
# keep running (opensquilla_site/gentle_stop.py --restart). Ctrl-C stops them all cleanly: the
# recipe's shell ignores it and honcho, stopping on it, exits 130 (143 on SIGTERM), which is how
# a run ends, not an error.
run: prepare-run
	$(BIN)/python manage.py bootstrap_operator
	@trap '' INT; $(BIN)/honcho start -f Procfile || { rc=$$?; [ $$rc -eq 130 ] || [ $$rc -eq 143 ]; }

# On a gateway's host: its mirror follower and a worker for its queue (Procfile.edge), against
# the central DATABASE_URL and CELERY_BROKER_URL (docs/OPERATIONS.md, "Edge deployment").
run-edge: install
	@trap '' INT; $(BIN)/honcho start -f Procfile.edge || { rc=$$?; [ $$rc -eq 130 ] || [ $$rc -eq 143 ]; }

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache  # the layering contracts in pyproject.toml

typecheck: install
	$(BIN)/mypy opensquilla_site sessions_app receipts_app operations_app

# The suite in two passes (docs/PERFORMANCE.md has its time). First everything but the browser
# tests, in parallel: pytest-xdist, one test database per worker; the tests that start real
# processes (Celery workers, soak loads) share one xdist group, so one of them runs at a time
# (tests/conftest.py). Then the browser tests, serially: Playwright's sync API keeps an event
# loop in its thread, which later async tests cannot share. PYTEST_ARGS narrows both passes
# (e.g. PYTEST_ARGS=tests/site); a browser pass that selects no test (pytest's exit 5) is then
# not a failure, an empty first pass is.
PYTEST_WORKERS ?= 2
PYTEST_ARGS ?=
pytest: install system-deps
	$(BIN)/python manage.py makemigrations --check --dry-run
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup -m "not browser" $(PYTEST_ARGS)
	$(BIN)/pytest -m browser $(PYTEST_ARGS) || [ $$? -eq 5 ]

test: lint typecheck pytest

bench: install
	$(BIN)/python bench/run_all.py

# The write figures of docs/PERFORMANCE.md (interleaved rounds against the fsync floor and the
# ledger's own statements on the raw driver), then the page regenerated from them.
bench-writes: install
	$(BIN)/python bench/write_rounds.py --backend sqlite --sqlite-sync FULL --rounds 5 --n 1000 --name write_rounds_sqlite_full
	$(BIN)/python bench/write_rounds.py --backend sqlite --sqlite-sync OFF --rounds 5 --n 1000 --name write_rounds_sqlite_off
	$(BIN)/python bench/write_rounds.py --backend postgres --rounds 5 --n 1000 --sides fsync,after,raw --name write_rounds_postgres_on
	$(BIN)/python bench/write_profile.py --n 1000 --name write_profile_sqlite_off
	$(BIN)/python bench/report.py --adopt var/bench/write_rounds_sqlite_full.json var/bench/write_rounds_sqlite_off.json var/bench/write_rounds_postgres_on.json var/bench/write_profile_sqlite_off.json

# docs/PERFORMANCE.md from bench/results/*.json (the suite checks it matches).
bench-report:
	$(BIN)/python bench/report.py

soak: install
	$(BIN)/pytest -m soak -p no:cacheprovider

# The embedded stack under load for SOAK_MINUTES (default 30), each process killed -9 once;
# prints messages lost, processes restarted and web's gaps (probes late > 1 s or failed);
# the figures go to bench/results/soak_embedded.json.
SOAK_MINUTES ?= 30
soak-embedded: install
	$(BIN)/python bench/soak_embedded.py --minutes $(SOAK_MINUTES) --save bench/results/soak_embedded.json

clean:
	rm -rf var/test_* var/screenshots .pytest_cache .mypy_cache .ruff_cache
