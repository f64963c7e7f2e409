#!/usr/bin/env bash
# A copy of HEAD for the device tool's `carry` (.gpu-snap, git-ignored): `git archive` of HEAD, the
# commit in .gpu-snap/COMMIT (the device copy's .git is not this tree's, so results would name a stale
# commit; records name it: harness.schema.git_commit), and the wheels its setup phase
# installs offline (.whl/flashinfer/0.6.18, .whl/sglang-slim, .whl/cluster, .whl/v2deps) when present.
# Another FlashInfer release does not fit beside them in one call's carry: stage it first, in a call
# of its own into the warm machine's /tmp, where the check's setup finds it:
#   carry [".whl/flashinfer/0.7.4"]: bash scripts/flashinfer_wheels.sh install .whl/flashinfer 0.7.4
#
#   bash scripts/gpu_snapshot.sh    # then, on the device: cd .gpu-snap && bash scripts/gpu_check.sh all
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu-snap && mkdir .gpu-snap
git archive HEAD | tar -x -C .gpu-snap
git rev-parse HEAD > .gpu-snap/COMMIT
if [ ! -d .whl/v2deps ]; then  # sglang-v2's imports with their own requirements (typing_extensions among them)
  python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl/v2deps msgspec pydantic || echo "gpu_snapshot: no .whl/v2deps (no registry): sglang-v2 needs msgspec, pydantic"
fi
mkdir -p .gpu-snap/.whl
for d in flashinfer/0.6.18 sglang-slim cluster v2deps; do
  if [ -d ".whl/$d" ]; then mkdir -p ".gpu-snap/.whl/$(dirname "$d")" && cp -r ".whl/$d" ".gpu-snap/.whl/$d"; fi
done
echo "snapshot of $(cut -c1-12 .gpu-snap/COMMIT): $(du -sh .gpu-snap | cut -f1)"
