#!/usr/bin/env bash
# The test command: set up .venv, then run the whole pytest suite (CPU: Triton interpreter).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
exec python -m pytest oracle_tests "$@"
