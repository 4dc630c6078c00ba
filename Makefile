# One entry point per job. `make run` and `make test` are the README's two commands.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The embedded default configures its workspaces explicitly (settings have no silent default):
# `make run` / `make demo` write them to .env on first run, which settings (so `manage.py` by
# hand), honcho and every process read. The test suite never reads .env.
RUN_WORKSPACE ?= $(CURDIR)/var/workspace

.PHONY: install system-deps migrate run demo test lint typecheck pytest bench soak soak-embedded clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install --quiet -e ".[dev]"

# Debian's Chromium for the browser tests (Playwright cannot download browsers here).
system-deps:
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = "0" ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium missing: run 'sudo apt-get install chromium' (browser tests will skip)"; fi; \
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

# Web (gunicorn), Celery worker, beat and the mirror together on the embedded default (SQLite,
# and the SQLite broker in var/celery-broker.sqlite3). WEB_BIND=host:port moves the web server
# (default 127.0.0.1:8000). A process that dies is started again with a backoff while the others
# keep running (opensquilla_site/gentle_stop.py --restart). Ctrl-C stops them all cleanly: the
# recipe's shell ignores it and honcho, stopping on it, exits 130 (143 on SIGTERM), which is how
# a run ends, not an error.
run: demo
	$(BIN)/python manage.py bootstrap_operator
	@trap '' INT; $(BIN)/honcho start -f Procfile || { rc=$$?; [ $$rc -eq 130 ] || [ $$rc -eq 143 ]; }

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache  # the layering contracts in pyproject.toml

typecheck: install
	$(BIN)/mypy opensquilla_site sessions_app receipts_app operations_app

pytest: install system-deps
	$(BIN)/python manage.py makemigrations --check --dry-run
	$(BIN)/pytest

test: lint typecheck pytest

bench: install
	$(BIN)/python bench/run_all.py

soak: install
	$(BIN)/pytest -m soak -p no:cacheprovider

# The embedded stack under load for SOAK_MINUTES (default 30), each process killed -9 once;
# prints messages lost, processes restarted and the longest gap in web answers.
SOAK_MINUTES ?= 30
soak-embedded: install
	$(BIN)/python bench/soak_embedded.py --minutes $(SOAK_MINUTES)

clean:
	rm -rf var/test_* var/screenshots .pytest_cache .mypy_cache .ruff_cache
