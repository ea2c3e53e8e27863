# The one shell helper of the device scripts: source it first, as
#     source "$(dirname "$0")/common.sh" "$@"
# It stops on unset variables, takes the output folder from the first argument (or DEFAULT_OUT),
# makes it (absolute, so a later cd keeps it), runs python unbuffered and works from the repository
# root, where the device machine runs its command. Loops over configurations belong in a suite
# (benchmarks/suites/*.json, run by python3 -m benchmarks.tools.run_suite), not in a script.
set -u
OUT=$(realpath -m "${1:-${DEFAULT_OUT:?usage: bash $0 OUT}}")
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
