#!/usr/bin/env bash
# Create ./.venv (once) with everything kernel-oracle needs, and install the project editable.
#
# CPU machines (CI, laptops): the pinned CPU build of torch from requirements-cpu.txt.
# GPU machines that already have a CUDA torch in python3: the venv sees it (--system-site-packages)
# and only the missing packages are installed, so your own GPU build is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  if "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "[setup] found a CUDA torch in $PY: creating .venv on top of it"
    "$PY" -m venv --system-site-packages .venv
  else
    "$PY" -m venv .venv
  fi
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
if python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  python -m pip install -q -r requirements-gpu.txt
else
  python -m pip install -q -r requirements-cpu.txt
fi
python -m pip install -q --no-deps -e .
python -c "import torch, triton; print(f'[setup] torch {torch.__version__}, triton {triton.__version__}, cuda={torch.cuda.is_available()}')"
