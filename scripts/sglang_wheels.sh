#!/usr/bin/env bash
# Fill the wheel cache with the SGLang releases the suite reads
# (docs/semantics.md#where-sglang-keeps-the-kernels), so oracle_tests/fuzz/test_sglang_release*.py and test_bug_corpus.py run the real kernels and wrappers.
# Wheels go to ${KERNEL_ORACLE_CACHE:-~/.cache/kernel-oracle}/wheels; a wheel already there (or in
# the repository's .whl/sglang/, which is git-ignored) is not fetched again.  Only the wheel is
# fetched (--no-deps): the suite reads its kernel files and never installs it.
# With KERNEL_ORACLE_REQUIRE naming sglang-wheels (CI) a release that cannot be fetched fails the script.
set -uo pipefail
cd "$(dirname "$0")/.."
releases=("$@")
py="${PYTHON:-$(command -v python3 || command -v python)}"
# every release of the release table (harness/releases.py SGLANG_RELEASES, which imports nothing): the csgmv
# kernels are tested in each (docs/csgmv.md); the kv_b and vision tests read 0.5.10, 0.5.12, 0.5.13, 0.5.15, 0.5.16
# and 0.5.23 of them
if [ ${#releases[@]} -eq 0 ]; then
  read -r -a releases < <("$py" -c 'import runpy; print(*runpy.run_path("harness/releases.py")["SGLANG_RELEASES"])')
  [ ${#releases[@]} -gt 0 ] || { echo "could not read the release table harness/releases.py with $py" >&2; exit 1; }
fi
dest="${KERNEL_ORACLE_CACHE:-$HOME/.cache/kernel-oracle}/wheels"
mkdir -p "$dest"
status=0
for v in "${releases[@]}"; do
  if compgen -G "$dest/sglang-$v-*.whl" >/dev/null; then
    echo "sglang $v: cached in $dest"
    continue
  fi
  if compgen -G ".whl/sglang/sglang-$v-*.whl" >/dev/null; then
    cp .whl/sglang/sglang-"$v"-*.whl "$dest"/ && echo "sglang $v: copied from .whl/sglang" && continue
  fi
  if "$py" -m pip download --no-deps --only-binary=:all: --python-version 3.11 --disable-pip-version-check -q \
       -d "$dest" "sglang==$v"; then
    echo "sglang $v: downloaded to $dest"
  else
    echo "sglang $v: could not be downloaded (no registry?); the tests that need it will skip" >&2
    case ",${KERNEL_ORACLE_REQUIRE:-}," in *,sglang-wheels,*) status=1 ;; esac
  fi
done
exit $status
