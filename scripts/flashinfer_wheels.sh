#!/usr/bin/env bash
# Bring FlashInfer's cuDNN prefill (target flashinfer-cudnn) to a GPU machine without network.
#
#   bash scripts/flashinfer_wheels.sh download [DIR]   # where a package registry is reachable
#   bash scripts/flashinfer_wheels.sh install  [DIR]   # on the GPU machine, offline
#   bash scripts/flashinfer_wheels.sh check            # what imports, with versions
#
# download fetches the three wheels below for CPython $PYVER on x86-64 Linux (whatever machine runs
# it) into DIR (default .whl/, ignored by git; 26 MB).  Copy DIR to the GPU machine (it travels
# with the repository when the device tool carries .whl).  install puts them into $SITE (default
# /tmp/flashinfer-site) with --no-deps --no-index: the rest of FlashInfer's requirements (torch,
# numpy, ...) must already be there; install lists any that are missing.  Then
#   export PYTHONPATH=$SITE:$PYTHONPATH
# (printed at the end) and the target resolves: kernel-oracle fuzz --targets flashinfer-cudnn ...
set -euo pipefail

# versions measured to import and run on the H200 machine (torch 2.11 cu130, cuDNN backend 9.19)
WHEELS=(flashinfer-python==0.6.18 nvidia-cudnn-frontend==1.28.0 apache-tvm-ffi==0.1.11)
PYVER=${PYVER:-3.12}
SITE=${SITE:-/tmp/flashinfer-site}
PYTHON=${PYTHON:-python3}
cmd=${1:-}
dir=${2:-.whl}

case "$cmd" in
  download)
    mkdir -p "$dir"
    platforms=()
    for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
             manylinux2014_x86_64; do
      platforms+=(--platform "$p")
    done
    "$PYTHON" -m pip download --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
      "${platforms[@]}" -d "$dir" "${WHEELS[@]}"
    ls -l "$dir"
    ;;
  install)
    shopt -s nullglob
    files=("$dir"/flashinfer_python-*.whl "$dir"/nvidia_cudnn_frontend-*.whl "$dir"/apache_tvm_ffi-*.whl)
    if [ "${#files[@]}" -ne 3 ]; then
      echo "install: expected the three wheels (${WHEELS[*]}) in $dir, found ${#files[@]}:" \
           "run 'bash scripts/flashinfer_wheels.sh download $dir' where a registry is reachable" >&2
      exit 2
    fi
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "${files[@]}"
    # requirements the wheels declare (extras skipped) that this interpreter cannot import
    "$PYTHON" - "${files[@]}" <<'EOF'
import importlib.metadata as md, re, sys, zipfile
missing = set()
for whl in sys.argv[1:]:
    with zipfile.ZipFile(whl) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        for line in z.read(meta).decode().splitlines():
            if line.startswith("Requires-Dist:") and "extra ==" not in line:
                name = re.split(r"[ ;<>=!~\[(]", line.split(":", 1)[1].strip())[0]
                if name.lower().replace("_", "-") in ("flashinfer-python", "nvidia-cudnn-frontend", "apache-tvm-ffi"):
                    continue
                try:
                    md.version(name)
                except md.PackageNotFoundError:
                    missing.add(name)
if missing:
    print("not installed here (FlashInfer needs them; bring their wheels too):", ", ".join(sorted(missing)))
EOF
    echo "installed into $SITE; now: export PYTHONPATH=$SITE:\${PYTHONPATH:-}"
    ;;
  check)
    "$PYTHON" -c "from fuzz.flashinfer_cudnn import engine_versions; print(engine_versions())"
    ;;
  *)
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
