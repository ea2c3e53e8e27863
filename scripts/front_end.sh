#!/usr/bin/env bash
# The dashboard's front-end files from the npm registry, as package-lock.json pins them: plotly.js's
# basic bundle, which draws the charts where `python -m dashboard.serve` serves it
# (dashboard/plotly_basic.py). Without npm the charts are drawn by Streamlit's own Plotly build, which
# a new browser tab takes about 1 s longer to load; nothing else changes.
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
want=$(sed -n 's/.*"plotly.js-basic-dist-min": "\([^"]*\)".*/\1/p' package.json)
have=$(sed -n 's/.*"version": "\([^"]*\)".*/\1/p' node_modules/plotly.js-basic-dist-min/package.json 2>/dev/null)
# Installed already, whole and at the pinned version: nothing to fetch (a restart works offline too).
if [ -n "$want" ] && [ "$want" = "$have" ] && "$PY" -c "from dashboard.static_preload import BASIC_BUNDLE, usable_bundle
raise SystemExit(usable_bundle(BASIC_BUNDLE) is None)" 2>/dev/null; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "front_end.sh: npm not found; the charts use Streamlit's own Plotly build (install Node.js for faster pages)" >&2
elif ! npm ci --silent --no-audit --no-fund --ignore-scripts; then
  echo "front_end.sh: npm ci failed; the charts use Streamlit's own Plotly build" >&2
fi
exit 0
