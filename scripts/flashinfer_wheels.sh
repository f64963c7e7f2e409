#!/usr/bin/env bash
# Bring FlashInfer's cuDNN prefill (target flashinfer-cudnn) to a GPU machine without network, one
# folder per FlashInfer release (Note [Engine versions] in fuzz/targets/flashinfer_engines.py).
#
#   bash scripts/flashinfer_wheels.sh download [DIR] [VERSION]   # where a package registry is reachable
#   bash scripts/flashinfer_wheels.sh install  [DIR] [VERSION]   # on the GPU machine, offline
#   bash scripts/flashinfer_wheels.sh check                      # what imports, with versions
#
# VERSION is one of ENGINE_RELEASES in fuzz/targets/flashinfer_engines.py (default 0.6.18, the release
# SGLang pins); the wheels of each release are pinned there.  download fetches them for CPython
# $PYVER on x86-64 Linux into DIR/VERSION (DIR default .whl/flashinfer, ignored by git) and drops
# flashinfer/data (the JIT sources, which the cuDNN path never compiles) from FlashInfer's wheel:
# 0.6.18 is 26 MB, 0.7.4 about 63 MB.  Carry DIR/VERSION to the GPU machine (one release per device
# call where they do not fit one call's carry together; the cache keeps what an earlier call installed).
# install puts them, with --no-deps --no-index, into $SITES/VERSION (SITES default
# $KERNEL_ORACLE_FLASHINFER_SITES, else flashinfer-sites in the cache, ~/.cache/kernel-oracle: a folder
# of your own, which the target checks before it imports from it), where flashinfer-cudnn@engine=VERSION
# finds them, and with SITE set also into $SITE (the engine plain `import flashinfer` finds once
# PYTHONPATH names $SITE).  install lists the requirements the wheels declare that this interpreter lacks.
set -euo pipefail

PYVER=${PYVER:-3.12}
PYTHON=${PYTHON:-python3}
SITES=${SITES:-${KERNEL_ORACLE_FLASHINFER_SITES:-${KERNEL_ORACLE_CACHE:-$HOME/.cache/kernel-oracle}/flashinfer-sites}}
ENGINES="$(cd "$(dirname "$0")/.." && pwd)/fuzz/targets/flashinfer_engines.py"
cmd=${1:-}
dir=${2:-.whl/flashinfer}
version=${3:-0.6.18}

case "$cmd" in
  download)
    mapfile -t wheels < <("$PYTHON" "$ENGINES" wheels "$version")
    mkdir -p "$dir/$version"
    platforms=()
    for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
             manylinux2014_x86_64; do
      platforms+=(--platform "$p")
    done
    "$PYTHON" -m pip download --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
      "${platforms[@]}" -d "$dir/$version" "${wheels[@]}"
    "$PYTHON" - "$dir/$version"/flashinfer_python-*.whl <<'EOF'
import os, sys, zipfile
# FlashInfer without flashinfer/data (its RECORD rewritten to match), in place
for whl in sys.argv[1:]:
    with zipfile.ZipFile(whl) as src:
        names = [n for n in src.namelist() if not n.startswith("flashinfer/data/")]
        if len(names) == len(src.namelist()):
            continue
        tmp = whl + ".slim"
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
            for n in names:
                data = src.read(n)
                if n.endswith(".dist-info/RECORD"):
                    data = "".join(line + "\n" for line in data.decode().splitlines()
                                   if not line.startswith("flashinfer/data/")).encode()
                out.writestr(src.getinfo(n), data)
    os.replace(tmp, whl)
EOF
    ls -l "$dir/$version"
    ;;
  install)
    shopt -s nullglob
    files=("$dir/$version"/*.whl)
    if [ ! -e "$dir/$version"/flashinfer_python-"$version"-*.whl ]; then
      echo "install: no flashinfer_python-$version wheel in $dir/$version: run" \
           "'bash scripts/flashinfer_wheels.sh download $dir $version' where a registry is reachable" >&2
      exit 2
    fi
    for target in "$SITES/$version" ${SITE:+"$SITE"}; do
      [ "$target" = "$SITES/$version" ] && rm -rf "$target"
      "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$target" \
        "${files[@]}"
    done
    # requirements the wheels declare (extras skipped) that this interpreter cannot import
    "$PYTHON" - "${files[@]}" <<'EOF'
import importlib.metadata as md, re, sys, zipfile
ours = set()
missing = set()
for whl in sys.argv[1:]:
    ours.add(re.split(r"-\d", whl.rsplit("/", 1)[-1])[0].lower().replace("_", "-"))
for whl in sys.argv[1:]:
    with zipfile.ZipFile(whl) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        for line in z.read(meta).decode().splitlines():
            if line.startswith("Requires-Dist:") and "extra ==" not in line:
                name = re.split(r"[ ;<>=!~\[(]", line.split(":", 1)[1].strip())[0]
                if name.lower().replace("_", "-") in ours:
                    continue
                try:
                    md.version(name)
                except md.PackageNotFoundError:
                    missing.add(name)
if missing:
    print("not installed here (FlashInfer declares them; the cuDNN prefill path may not need them):",
          ", ".join(sorted(missing)))
EOF
    echo "FlashInfer $version installed into $SITES/$version${SITE:+ and $SITE}"
    ;;
  check)
    "$PYTHON" -c "from kernel_oracle.fuzz.targets.flashinfer_cudnn import engine_versions; print(engine_versions())"
    ;;
  *)
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
