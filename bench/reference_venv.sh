#!/usr/bin/env bash
# Creates var/bench/ref-venv: Python 3.12 with the reference implementation (PyPI opensquilla==0.3.0).
# Idempotent: an existing venv that already imports opensquilla is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
PY312="${REF_PYTHON:-/root/.pyenv/versions/3.12.1/bin/python}"
VENV=var/bench/ref-venv
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import opensquilla.session.storage" 2>/dev/null; then
  echo "reference venv ready: $VENV"
  exit 0
fi
mkdir -p var/bench
"$PY312" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
"$VENV/bin/pip" install --quiet "opensquilla==0.3.0"
"$VENV/bin/python" -c "import opensquilla.session.storage; print('reference venv ready:', '$VENV')"
