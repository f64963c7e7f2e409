#!/usr/bin/env bash
# CI proof that kernel-oracle installs as a wheel beside Hugging Face's `kernels` and works in another
# project:
#   1. build the wheel from the working tree (a copy: the checkout gets no build/ folder);
#   2. a fresh venv (nothing of .venv, nothing of the checkout) gets the wheel, HF's `kernels` and
#      the pinned CPU torch/triton of requirements-cpu.txt;
#   3. both import, from the venv: `import kernels` is HF's, `import kernel_oracle.kernels` is ours;
#   4. pytest loads our plugin through its pytest11 entry point (`--oracle-target` in `pytest --help`);
#   5. examples/external_tests runs with that venv from a folder outside the checkout, and must
#      catch its planted bug (one test expects the AssertionError, one is a strict xfail);
#   6. the real-bug corpus `kernel-oracle matrix` runs is installed with the wheel: the venv loads every
#      entry of the checkout's corpus/ from its own kernel_oracle/corpus.
# Exit 0 when all hold; the first failure stops it with its reason.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
PY=${PYTHON:-"$REPO/.venv/bin/python"}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kernel-oracle-wheel.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
say() { echo "[wheel-check $(date -u +%H:%M:%S)] $*"; }
pins() { grep -E "^$1==" "$REPO/requirements-cpu.txt"; }
quiet() { "$@" > "$WORK/log.txt" 2>&1 || { tail -40 "$WORK/log.txt"; echo "failed: $*"; exit 1; }; }

say "1/6 building the wheel from the working tree"
mkdir -p "$WORK/src" "$WORK/dist"
git ls-files -z --cached --others --exclude-standard \
  | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$WORK/src"
quiet "$PY" -m pip wheel --no-deps --no-build-isolation "$WORK/src" -w "$WORK/dist"
WHEEL=$(ls "$WORK"/dist/kernel_oracle-*.whl)
say "built $(basename "$WHEEL")"

say "2/6 fresh venv: the wheel, Hugging Face's kernels, $(pins torch), $(pins triton)"
BASE=$("$PY" -c "import sys; print(sys.base_prefix)")/bin/python3
"$BASE" -m venv "$WORK/venv"
VPY="$WORK/venv/bin/python"
# --no-compile: byte-compiling torch's files at install time costs more than the install (118 s -> 41 s)
quiet "$VPY" -m pip install --no-compile --disable-pip-version-check "$WHEEL" kernels "$(pins torch)" "$(pins triton)"

# everything below runs outside the checkout, with nothing of it on the path
mkdir -p "$WORK/elsewhere"
cd "$WORK/elsewhere"
unset PYTHONPATH
export TRITON_INTERPRET=1  # a CPU machine: Triton kernels (ours, imported below) run interpreted

say "3/6 both packages import from the venv"
"$VPY" - "$REPO" "$WORK/venv" <<'EOF'
import importlib.metadata as md, os, sys
repo, venv = (os.path.realpath(p) + os.sep for p in sys.argv[1:3])
import kernels
import kernel_oracle, kernel_oracle.kernels, kernel_oracle.reference, kernel_oracle.fuzz
for mod in (kernels, kernel_oracle, kernel_oracle.kernels, kernel_oracle.reference, kernel_oracle.fuzz):
    where = os.path.realpath(mod.__file__)
    assert where.startswith(venv) and not where.startswith(repo), f"{mod.__name__} from {where}, not the venv"
owners = md.packages_distributions()
assert owners.get("kernels") == ["kernels"], f"top-level `kernels` belongs to {owners.get('kernels')}, not HF's"
assert owners.get("kernel_oracle") == ["kernel-oracle"], owners.get("kernel_oracle")
assert hasattr(kernels, "get_kernel"), "`import kernels` is not Hugging Face's kernel hub"
stray = sorted(n for n in ("reference", "fuzz", "reports", "harness", "benchmarks") if n in owners)
assert not stray, f"top-level names installed by someone: {stray}"
import torch
print(f"kernels {md.version('kernels')} and kernel-oracle {md.version('kernel-oracle')} side by side (torch {torch.__version__})")
EOF

say "4/6 pytest loads the plugin through its entry point"
"$VPY" -m pytest --help -p no:cacheprovider > "$WORK/help.txt"
grep -q -- "--oracle-target" "$WORK/help.txt" || { echo "pytest --help lacks --oracle-target"; exit 1; }
grep -q -- "--oracle-record" "$WORK/help.txt" || { echo "pytest --help lacks --oracle-record"; exit 1; }

say "5/6 examples/external_tests against the installed wheel"
cp -r "$REPO/examples/external_tests" "$WORK/elsewhere/project"
cd "$WORK/elsewhere/project"
"$VPY" -m pytest -q -p no:cacheprovider --oracle-record "$WORK/record/" | tee "$WORK/example.txt"
grep -Eq "^[0-9]+ passed, 1 xfailed" "$WORK/example.txt" || { echo "expected passes and 1 xfailed (the planted bug)"; exit 1; }
ls "$WORK"/record/pytest-*.json >/dev/null
say "6/6 the real-bug corpus from the installed wheel"
"$VPY" - "$REPO" "$WORK/venv" <<'EOF'
import os, sys
from pathlib import Path
repo, venv = Path(sys.argv[1]), os.path.realpath(sys.argv[2]) + os.sep
from kernel_oracle.jobs.bug_corpus import CORPUS_DIR, known_cases_for, load_corpus
assert os.path.realpath(CORPUS_DIR).startswith(venv), f"corpus read from {CORPUS_DIR}, not the venv"
want = sorted(p.stem for p in (repo / "corpus").glob("*.toml"))
got = [e.id for e in load_corpus()]
assert got == want, f"installed corpus {got} differs from the checkout's {want}"
assert known_cases_for("sglang==0.5.12"), "no known cases for sglang==0.5.12 from the installed corpus"
print(f"{len(got)} corpus entries from {CORPUS_DIR}")
EOF
say "ok: wheel, HF kernels and the example project all work together"
