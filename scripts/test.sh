#!/usr/bin/env bash
# Install everything the tests need, then run the whole suite (CI runs exactly this).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! command -v cc >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq gcc
fi
# The browser test drives Debian's Chromium (Playwright's own browser download needs the internet).
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium >/dev/null
  else sudo apt-get update -qq && sudo apt-get install -y -qq chromium >/dev/null; fi
fi
# bubblewrap: the isolation tests (tests/test_isolation_namespaces.py) run kernels under it; skipped without.
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null
  elif command -v sudo >/dev/null 2>&1; then sudo apt-get update -qq && sudo apt-get install -y -qq bubblewrap >/dev/null; fi
fi
"$PY" -m pip install -q --disable-pip-version-check -r requirements.txt
# AbeBot itself (pyproject.toml): `core`, `store`, `dashboard` importable from anywhere, and `abebot`
"$PY" -m pip install -q --disable-pip-version-check --no-deps -e .
bash scripts/front_end.sh  # the browser test draws the charts as the dashboard does
# pytest-xdist: one worker per core (ABEBOT_TEST_WORKERS to choose; 0 runs in this process). Run
# serially the suite keeps one of two cores busy: it waits on sandboxes, compilers and the browser.
exec "$PY" -m pytest -q -n "${ABEBOT_TEST_WORKERS:-auto}" --dist worksteal "$@"
