#!/usr/bin/env bash
# Install AbeBot's requirements and start the dashboard on http://127.0.0.1:8501 (localhost only).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
"$PY" -m pip install -q --disable-pip-version-check -r requirements.txt
export ABEBOT_RUNS_DIR=${ABEBOT_RUNS_DIR:-$PWD/runs}
mkdir -p "$ABEBOT_RUNS_DIR"
exec "$PY" -m streamlit run app.py "$@"
