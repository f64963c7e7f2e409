#!/usr/bin/env bash
# The main job: set up .venv, then run the differential suite + fuzz campaign and write
# reports/out/latest.{json,md,html} (GPU if present, else the CPU interpreter).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
exec kernel-oracle run "$@"
