#!/usr/bin/env bash
# Install AbeBot's requirements and start the dashboard on http://127.0.0.1:8501 (localhost only).
# Open the URL it prints ("Open the dashboard: http://127.0.0.1:8501/?token=..."): the dashboard asks
# for its token (kept in $ABEBOT_RUNS_DIR/.secrets/dashboard-token). Options for dashboard/serve.py:
# --allow-host HOST (another name it may be reached by), --no-token (behind your own authentication).
# The CPU backend compiles kernels with the system C compiler and OpenMP: without root this script
# only says how to install one; as root it installs gcc with apt-get (Debian, Ubuntu).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
has_openmp_cc() {
  local tmp; tmp=$(mktemp -d)
  printf '#include <omp.h>\nint main(void){return omp_get_max_threads() > 0 ? 0 : 1;}\n' > "$tmp/t.c"
  local ok=1
  for cc in cc gcc; do
    if command -v "$cc" >/dev/null 2>&1 && "$cc" -fopenmp "$tmp/t.c" -o "$tmp/t" >/dev/null 2>&1; then ok=0; break; fi
  done
  rm -rf "$tmp"
  return $ok
}
if ! has_openmp_cc; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq gcc >/dev/null
  else
    echo "dashboard.sh: the CPU backend needs a C compiler with OpenMP; install one first," >&2
    echo "  e.g. sudo apt-get install gcc   (Debian/Ubuntu)" >&2
    exit 1
  fi
fi
# Without an NVIDIA GPU the GPU wheels (torch, triton, cupy: ~1.6 GB) would never be used: the CPU list.
# ABEBOT_REQUIREMENTS=requirements.txt installs everything anyway.
if [ -z "${ABEBOT_REQUIREMENTS:-}" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    ABEBOT_REQUIREMENTS=requirements.txt
  else
    ABEBOT_REQUIREMENTS=requirements-cpu.txt
    echo "dashboard.sh: no NVIDIA GPU found: installing the CPU-only requirements ($ABEBOT_REQUIREMENTS)" >&2
  fi
fi
"$PY" -m pip install -q --disable-pip-version-check -r "$ABEBOT_REQUIREMENTS"
# AbeBot itself (pyproject.toml): `core`, `store`, `dashboard` importable from anywhere, and `abebot`
"$PY" -m pip install -q --disable-pip-version-check --no-deps -e .
bash scripts/front_end.sh  # plotly.js's basic bundle for the charts, where npm is installed
export ABEBOT_RUNS_DIR=${ABEBOT_RUNS_DIR:-$PWD/runs}
mkdir -p "$ABEBOT_RUNS_DIR"
# `streamlit run app.py`, plus a warm-up of the pages' imports at server start, behind the host,
# origin and token checks of dashboard/guard.py; it prints the URL to open, token included.
exec "$PY" -m dashboard.serve "$@"
