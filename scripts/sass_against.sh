#!/usr/bin/env bash
# Does this tree's kernel code compile to the same sm_90 SASS as BASE's, with the H200's Triton?
#
#   bash scripts/sass_against.sh BASE [hopper_sass arguments...]     (default: --calls fused split --vision)
#
# Any machine, no GPU: a refactor of the kernels (a fold, a rename) is proven not to change what the H200
# runs when every kernel's SASS is byte-identical (tools/hopper_sass.py, docs/kernels_lora.md).  A
# venv of its own (.sass-venv: triton 3.6.0, the H200's, and the pinned CPU torch) compiles BASE (a git
# worktree, with this tree's hopper_sass.py, bench_lora.py, bench_vision.py and fuzz/precompile.py: the
# same tool and benchmark inputs on BASE's kernels) into --out, then this tree --against it.  Exit 0: all the
# same; 1: a kernel differs (the table says which); 2: a usage error.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 1 ]] || { echo "usage: bash scripts/sass_against.sh BASE [hopper_sass arguments...]" >&2; exit 2; }
BASE=$1
shift
ARGS=("$@")
[[ ${#ARGS[@]} -gt 0 ]] || ARGS=(--calls fused split --vision)
TRITON_VERSION=${SASS_TRITON:-3.6.0}
ROOT=$(pwd)
VENV=$ROOT/.sass-venv
if [[ ! -x $VENV/bin/python ]]; then
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  # torch without its own pins (they name another triton); what it imports, listed
  "$VENV/bin/python" -m pip install -q "triton==$TRITON_VERSION" numpy typing_extensions sympy filelock jinja2 \
    networkx fsspec "setuptools>=77" wheel 2>&1 | grep -v "^WARNING: Location" || true
  "$VENV/bin/python" -m pip install -q --no-deps "$(grep -E '^torch==' requirements-cpu.txt)" 2>&1 \
    | grep -v "^WARNING: Location" || true
fi
WORK=$(mktemp -d)
trap 'git -C "$ROOT" worktree remove --force "$WORK/base" >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
git worktree add -q --detach "$WORK/base" "$BASE"
# the tool, its launch stand-in and the benchmarks' shapes and inputs as they are now, on BASE's kernels
# and wrappers
for f in benchmarks/bench_lora.py benchmarks/bench_vision.py fuzz/precompile.py; do
  cp "$f" "$WORK/base/$f"
done
unset TRITON_INTERPRET
run() {  # run TREE ARGS...: hopper_sass with TREE installed as kernel_oracle
  (cd "$1" && "$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1)
  shift
  (cd "$WORK" && "$VENV/bin/python" "$ROOT/tools/hopper_sass.py" "$@")
}
echo "[sass_against] $BASE ($(git rev-parse --short "$BASE")) with triton $TRITON_VERSION"
run "$WORK/base" "${ARGS[@]}" --out "$WORK/sass" >/dev/null
echo "[sass_against] this tree against it"
status=0
run "$ROOT" "${ARGS[@]}" --against "$WORK/sass" || status=$?
exit $status
