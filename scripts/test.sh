#!/usr/bin/env bash
# The test command: set up .venv, then run the whole pytest suite (CPU: Triton interpreter).
# On a machine without a GPU the tests run on up to 4 pytest-xdist workers, one per core (the suite is
# CPU-bound there: one process took 24 minutes on the 2-core CI machine); a command that names -n,
# --numprocesses, -p no:xdist, --pdb or --trace runs as given (`bash scripts/test.sh -n 0`: one process).
# On a GPU machine the plugin decides (Note [Parallel on a GPU machine] in kernel_oracle/pytest/plugin.py).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
workers=()
if [ -z "$(ls /proc/driver/nvidia/gpus 2>/dev/null)" ] && python -c "import xdist" 2>/dev/null; then
  case " $* " in
    *" -n"*|*" --numprocesses"*|*"no:xdist"*|*" --pdb"*|*" --trace"*) ;;
    *) n=$(nproc); [ "$n" -gt 4 ] && n=4; [ "$n" -ge 2 ] && workers=(-n "$n") ;;
  esac
fi
exec python -m pytest oracle_tests ${workers[@]+"${workers[@]}"} "$@"
