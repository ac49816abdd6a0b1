#!/usr/bin/env bash
# Fresh machine -> test results: make a virtual environment, install nerfstudio-accel with its
# test extras (pip resolves torch together with nerfstudio), run the whole CPU test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -e ".[test]"
exec "$VENV/bin/python" -m pytest tests -q -p no:cacheprovider "$@"
