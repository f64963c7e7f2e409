#!/usr/bin/env bash
# The GPU check of kernel-oracle on a CUDA machine (the device tool's H100 or H200), in phases; results in
# docs/BENCHMARKS.md.  The whole check is two device calls of `all`, back to back on one machine:
#
#   call 1: setup, soak-start, suite, main-job          call 2: matrix, soak-wait, bench repros
#
#   bash scripts/gpu_check.sh setup          # offline installs of the carried wheels, this checkout editable
#   bash scripts/gpu_check.sh soak-start [S] # detached S-second campaigns (600) of SGLang 0.5.23's code, one per
#                                            # code and configuration; they run on through the next phases
#                                            # (SOAK_NICE=N: at that CPU priority, beside a timed phase)
#   bash scripts/gpu_check.sh suite [T] [P..]# the pytest suite (or its paths P), stopped after T s (300) and
#                                            # continued by the next `suite` where it stopped; the two-stream
#                                            # tests once under CSAN
#   bash scripts/gpu_check.sh main-job [P..] # kernel-oracle run --device cuda --time 120 on a cold kernel cache
#                                            # (P: cold warm, to add the same cache warm)
#   bash scripts/gpu_check.sh matrix [S] [L] # every release x code x configuration of lora, vision and csgmv and
#                                            # each staged FlashInfer release, side by side: the newest release's
#                                            # columns S s each (90), older ones their regression budget; stopped
#                                            # after L s (330)
#   bash scripts/gpu_check.sh soak-wait [W]  # wait up to W s (600) for the soak; its findings by bucket
#   bash scripts/gpu_check.sh bench [PART..] # lora vision sglang verdicts oracle (default: all): the tables; sglang
#                                            # also runs every standalone reproducer of docs/upstream/ (repros:
#                                            # those alone)
#   bash scripts/gpu_check.sh all [S]        # the sequence above (soak of S s); ends with the table of every phase
#   bash scripts/gpu_check.sh table          # that table alone
#
# Carry .gpu-snap (scripts/gpu_snapshot.sh: HEAD, COMMIT, .whl/flashinfer, .whl/sglang-slim, .whl/v2deps)
# and run from inside it.  Every phase writes its logs under $OUT (the device tool's folder, else
# ./gpu-out), prints a compact summary and adds a row to the machine's table (/tmp/gpu-check), which
# outlives one device call while the machine stays warm: `all` skips the phases already done there and
# stops before a phase that would pass ALL_BUDGET seconds (570; the device tool allows 600 a call), so
# calling it again continues the sequence (a suite stopped at its limit goes on where it stopped).  A
# process left running must not keep its working directory in the carried tree, which the next call
# replaces (soak-start runs from /tmp/gpu-check).  The soak's campaigns keep importing from this tree
# (their workers start later): carry the same snapshot to the calls until soak-wait.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
STATE=/tmp/gpu-check; SOAK=$STATE/soak; mkdir -p "$STATE"
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache}
# FlashInfer's releases, one folder each (scripts/flashinfer_wheels.sh install), named outright: the main job's
# cold pass runs on a fresh KERNEL_ORACLE_CACHE, which must not hide them
export KERNEL_ORACLE_FLASHINFER_SITES=${KERNEL_ORACLE_FLASHINFER_SITES:-$HOME/.cache/kernel-oracle/flashinfer-sites}
T0=$(date +%s)

record() {  # PHASE RC SECONDS HEADLINE: a row of the machine's table
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$STATE/table.tsv"
  echo "== $1: exit $2 in $3 s: $4"
}
timed() {  # PHASE TIMEOUT LOG COMMAND...: run COMMAND into LOG; sets RC and SECS
  # its own process group (setsid), stopped at TIMEOUT: SIGTERM to the group, SIGKILL 20 s later; a process
  # the GPU driver holds (uninterruptible after a faulted context) may outlive even that, so the phase
  # never waits for the group once it is killed, and the call goes on to the next phase
  local phase=$1 limit=$2 log=$3; shift 3; local start pid; start=$(date +%s)
  setsid "$@" >"$log" 2>&1 </dev/null & pid=$!
  while kill -0 "$pid" 2>/dev/null && [ $(( $(date +%s) - start )) -lt "$limit" ]; do sleep 1; done
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null
    local t; for t in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -KILL -- "-$pid" 2>/dev/null; RC=124
    echo "$phase: stopped after $limit s"
  else
    wait "$pid"; RC=$?
  fi
  SECS=$(( $(date +%s) - start ))
}

setup() {  # FlashInfer's releases (0.6.18 also into /tmp/site), the cluster wheels where present, the checkout editable
  shopt -s nullglob; local fi=(.whl/flashinfer/*/flashinfer_python-*.whl) cl=(.whl/cluster/*.whl) start
  start=$(date +%s); RC=0
  for w in "${fi[@]}"; do  # .whl/flashinfer/VERSION: flashinfer-cudnn@engine=VERSION (scripts/flashinfer_wheels.sh)
    local ver; ver=$(basename "$(dirname "$w")")
    env $([ "$ver" = 0.6.18 ] && echo SITE=/tmp/site) PYTHON=python3 bash scripts/flashinfer_wheels.sh install \
      .whl/flashinfer "$ver" || RC=2
  done
  [ ${#fi[@]} -gt 0 ] || echo "setup: no .whl/flashinfer/VERSION: the flashinfer-cudnn target stays unavailable"
  ls -d "$KERNEL_ORACLE_FLASHINFER_SITES"/*/flashinfer 2>/dev/null | sed 's|^|setup: FlashInfer release ready: |' || true
  local v2=(.whl/v2deps/*.whl)  # msgspec and pydantic: SGLang 0.5.23's triton_v2 files import them (sglang-v2)
  if [ ${#v2[@]} -gt 0 ] && ! python3 -c "import msgspec, pydantic" 2>/dev/null; then
    python3 -m pip install -q --no-index --find-links .whl/v2deps --target /tmp/site msgspec pydantic \
      >"$OUT/setup-v2deps.log" 2>&1 || { tail -3 "$OUT/setup-v2deps.log"; RC=2; }
  fi
  if [ ${#cl[@]} -gt 0 ]; then  # dask and distributed for --gpus (made by pip download: docs/scaling.md)
    python3 -m pip install -q --no-index --find-links .whl/cluster dask distributed || RC=2
  fi
  python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/setup.log" 2>&1 || { tail -5 "$OUT/setup.log"; RC=2; }
  local sg=(.whl/sglang-slim/*.whl)  # the release tests read wheels from the cache (scripts/sglang_wheels.sh)
  if [ ${#sg[@]} -gt 0 ]; then mkdir -p ~/.cache/kernel-oracle/wheels && cp "${sg[@]}" ~/.cache/kernel-oracle/wheels/; fi
  local head; head=$(python3 -c "import torch, triton, kernel_oracle; print('torch', torch.__version__, 'triton', \
triton.__version__, 'kernel-oracle', kernel_oracle.__version__, torch.cuda.get_device_name())" 2>&1 | tail -1)
  record setup "$RC" $(( $(date +%s) - start )) "$head"
}

suite() {  # T [PATH...]: the suite (or PATHs of it), continued where an earlier call's limit stopped it
  # (scripts/pytest_resume.py); -v: each result line names its test, so a run stopped at its limit still names
  # its failures, and each failure's traceback is kept as it arrives
  local done=$STATE/suite-done.tsv per=() limit=${1:-300}; shift; local paths=("$@")
  [ ${#paths[@]} -gt 0 ] || paths=(oracle_tests)
  python3 -c "import pytest_timeout" 2>/dev/null && per=(--timeout=240)  # one stuck test is its failure, not the call's
  # workers: compilation-bound on a GPU host (Note [Parallel on a GPU machine]); all cores but two, named
  # on the command line (an environment variable would reach the tests of that very setting)
  PYTHONPATH=$PWD/scripts:$PYTHONPATH timed suite "$limit" "$OUT/suite.log" python3 -m pytest "${paths[@]}" -v \
    -n "$(( $(nproc) - 2 ))" \
    -p no:cacheprovider -p pytest_resume --resume-log "$done" --durations=30 -rfEs --tb=short "${per[@]}"
  [ "$RC" -eq 5 ] && RC=0  # every test already done in an earlier call
  if [ "$RC" -ne 124 ] && [ ! -f "$STATE/csan.log" ] && [ "${paths[*]}" = oracle_tests ]; then  # the two-stream path once under torch's CUDA sanitizer
    local rc=$RC secs=$SECS
    timed csan 90 "$STATE/csan.log" env TORCH_CUDA_SANITIZER=1 python3 -m pytest oracle_tests/fuzz/test_sglang_two_stream.py \
      -p no:xdist -q -p no:cacheprovider
    echo "two-stream tests under TORCH_CUDA_SANITIZER=1: exit $RC ($(tail -1 "$STATE/csan.log"))"; RC=$rc SECS=$secs
    cp "$STATE/csan.log" "$OUT/"
  fi
  cp "$done.tb" "$OUT/suite-tracebacks.txt" 2>/dev/null
  local head; head=$(python3 scripts/pytest_resume.py "$done" | tee "$OUT/suite-failures.txt" | head -1)
  grep -c "^FAILED" "$OUT/suite-failures.txt" >/dev/null && grep "^FAILED" "$OUT/suite-failures.txt" | head -60 | cut -c1-200
  if [ "$RC" -eq 124 ]; then
    record suite-part "$RC" "$SECS" "stopped at its limit, to be continued: $head"
  else
    [ "$RC" -eq 0 ] && grep -q "^FAILED" "$OUT/suite-failures.txt" && RC=1
    record suite "$RC" "$SECS" "$head (every call of it together)"
  fi
}

soak_start() {
  local secs=${1:-600}; rm -rf "$SOAK"; mkdir -p "$SOAK"
  start() {  # NAME ARGS...: one detached campaign (setsid: it outlives this device call)
    local name=$1; shift
    # cwd outside the carried tree: the next device call replaces that tree, and a process whose working
    # directory was deleted cannot start workers (multiprocessing reads os.getcwd())
    (cd "$STATE" && setsid nohup nice -n "${SOAK_NICE:-0}" python3 -m kernel_oracle fuzz "$@" --device cuda --time "$secs" --seed 7 --quiet \
      --out "$SOAK/$name" >"$SOAK/$name.log" 2>&1 </dev/null &)
  }
  local wheel=(); [ -d .whl/sglang-slim ] && wheel=(--sglang-wheel "$PWD/.whl/sglang-slim")
  # SGLang 0.5.23, the code it ships today (docs/BENCHMARKS.md, "Soaks"): each kv_b code and configuration,
  # csgmv under every switch it reads, the vision wrapper on each FlashInfer release staged here
  start v2 --targets sglang-v2==0.5.23 --op lora "${wheel[@]}"
  start v2-pdl-off --targets sglang-v2==0.5.23@pdl=off --op lora "${wheel[@]}"
  start trt-two-stream --targets sglang-trt==0.5.23@lora_opti=on --op lora "${wheel[@]}"
  start csgmv --targets sglang-csgmv==0.5.23 --op csgmv "${wheel[@]}"
  start csgmv-split-k --targets sglang-csgmv==0.5.23@split_k=on --op csgmv "${wheel[@]}"
  start csgmv-deterministic --targets sglang-csgmv==0.5.23@deterministic=on --op csgmv "${wheel[@]}"
  local v; for v in $(ls "$KERNEL_ORACLE_FLASHINFER_SITES" 2>/dev/null); do
    start "vision-fi-$v" --targets "sglang==0.5.23@engine=$v" --op vision "${wheel[@]}"; done
  record soak-start 0 0 "$(ls "$SOAK"/*.log | wc -l) campaigns of $secs s started: SGLang 0.5.23's v2 (PDL on, off), TRT-style with the two-stream fused sides, csgmv (default, split-K, deterministic), the vision wrapper per FlashInfer release"
}

soak_wait() {
  [ -d "$SOAK" ] || { record soak-wait 2 0 "no soak started on this machine"; return; }
  local start; start=$(date +%s)
  while [ $(( $(date +%s) - start )) -lt "${1:-600}" ] && pgrep -f -- "--out $SOAK/" >/dev/null; do sleep 5; done
  # one archive of every campaign's summary and log ($OUT brings back at most 8 files)
  (cd "$SOAK" && tar -czf "$OUT/soak.tgz" --ignore-failed-read ./*.log ./*/summary.json 2>/dev/null)
  local head; head=$(python3 - "$SOAK" 2>"$OUT/soak-buckets.txt" <<'PY'
import collections, json, pathlib, sys
total = new = 0
for d in sorted(p for p in pathlib.Path(sys.argv[1]).iterdir() if p.is_dir()):
    s = json.loads((d / "summary.json").read_text()) if (d / "summary.json").exists() else {}
    c, f = s.get("campaign", {}), s.get("findings", [])
    buckets = collections.Counter((x.get("kind"), x.get("op"), x.get("dtype"), bool(x.get("known"))) for x in f)
    print(f"soak {d.name}: cases={c.get('executed')} elapsed={c.get('elapsed_s')} status={c.get('status')} "
          f"findings={len(f)}", file=sys.stderr)
    for (kind, op, dtype, known), n in sorted(buckets.items(), key=str):
        print(f"   {kind} {op} {dtype} {'known' if known else 'NEW'} x{n}", file=sys.stderr)
    total += c.get("executed") or 0
    new += sum(1 for x in f if not x.get("known"))
print(f"{total} cases, {new} new findings")
PY
)
  cat "$OUT/soak-buckets.txt"
  record soak-wait "$([ "${head##*, }" = "0 new findings" ] && echo 0 || echo 1)" $(( $(date +%s) - start )) "$head"
}

repro_runs() {  # SCRIPT: the invocations of one reproducer of docs/upstream/ (one per line: its arguments)
  local w; w() { ls "$PWD"/.whl/sglang-slim/sglang-"$1"-*.whl ~/.cache/kernel-oracle/wheels/sglang-"$1"-*.whl 2>/dev/null | head -1; }
  local cuda=cpu; python3 -c "import flashinfer.prefill" 2>/dev/null && cuda=cuda  # the real engine needs FlashInfer
  case "$(basename "$1")" in
    sglang_kv_b_empty_batch.py) echo "--wheel $(w 0.5.23) --variant default"; echo "--wheel $(w 0.5.23) --variant trt" ;;
    sglang_trt_cublas_every_slot.py) echo "--wheel $(w 0.5.13)"; echo "--wheel $(w 0.5.15)" ;;
    sglang_csgmv_fp32_shared_memory.py) for v in 0.5.10 0.5.11 0.5.14 0.5.23; do echo "--wheel $(w $v)"; done ;;
    sglang_trt_cublas_step_b_q.py|sglang_v2_lora_a_rank_above_width.py) echo "--wheel $(w 0.5.23)" ;;
    sglang_vision_wrapper_repro.py) echo "--wheel $(w 0.5.23) --device $cuda" ;;
    triton_hopper_ws.py|triton_split_pv.py) echo "" ;;
    *) echo "UNKNOWN" ;;
  esac
}

upstream_repros() {  # every standalone reproducer of docs/upstream/ on this GPU, as a user runs it: exit 0 (not
  # reproduced) or 1 (reproduced) is a run; 2, a traceback, a timeout or an import of kernel_oracle is a failure.
  # Its path holds what its page names (torch, triton, the wheel; FlashInfer for the vision wrapper on cuDNN:
  # /tmp/site, where setup installs FlashInfer 0.6.18 and the v2 files' msgspec and pydantic), never the checkout
  local f args rc ran=0 bad="" log="$OUT/upstream_repros.log"; : >"$log"
  for f in docs/upstream/*.py; do
    while IFS= read -r args; do
      if [ "$args" = UNKNOWN ]; then bad+=" $(basename "$f")(no invocation in gpu_check.sh)"; continue; fi
      echo "== $f $args" >>"$log"
      # shellcheck disable=SC2086
      (cd "$(dirname "$f")" && env PYTHONPATH=/tmp/site timeout 300 python3 - "$(basename "$f")" $args <<'PY') >>"$log" 2>&1
import os, runpy, sys
sys.argv = sys.argv[1:]
sys.path.insert(0, os.getcwd())
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
    code = 0
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
if any(m == "kernel_oracle" or m.startswith("kernel_oracle.") for m in sys.modules):
    print("FAILED: the reproducer imported kernel_oracle (it must need torch, triton and the wheel only)")
    code = 2
sys.exit(code)
PY
      rc=$?; echo "== exit $rc" >>"$log"
      if [ "$rc" -le 1 ]; then ran=$((ran + 1)); else bad+=" $(basename "$f")[$args](exit $rc)"; fi
    done < <(repro_runs "$f")
  done
  REPROS="upstream reproducers: $ran runs${bad:+; FAILED:$bad}"
  echo "$REPROS"; [ -z "$bad" ]
}

bench_part() {  # PART: one benchmark in its plain table mode
  local cmd
  case "$1" in
    lora) cmd=(python3 -m kernel_oracle.benchmarks.bench_lora --json "$OUT/bench_lora.json") ;;
    vision) cmd=(python3 -m kernel_oracle.benchmarks.bench_vision --json "$OUT/bench_vision.json") ;;
    sglang) cmd=(python3 -m kernel_oracle.benchmarks.sglang_gpu --wheels .whl/sglang-slim --json "$OUT/sglang_gpu.json") ;;
    verdicts) cmd=(python3 -m kernel_oracle.benchmarks.gpu_verdicts --json "$OUT/gpu_verdicts.json") ;;
    oracle) cmd=(python3 -m kernel_oracle bench --device cuda --targets triton,reference --time 15 --main-time 0
                 --out "$OUT") ;;  # writes $OUT/oracle-bench.json
    repros) T_PART=$(date +%s); RC=0; upstream_repros || RC=1
            record bench-repros "$RC" $(( $(date +%s) - T_PART )) "$REPROS"; return ;;
    *) echo "bench: unknown part $1 (lora vision sglang verdicts oracle repros)"; return 2 ;;
  esac
  T_PART=$(date +%s)
  timed "bench-$1" 560 "$OUT/bench_$1.log" "${cmd[@]}"
  grep -E "^\|" "$OUT/bench_$1.log" | tail -20 | cut -c1-220
  local extra=""  # the sglang part also runs every standalone reproducer of docs/upstream/ (upstream_repros.log)
  if [ "$1" = sglang ]; then upstream_repros || { [ "$RC" -eq 0 ] && RC=1; }; extra="; $REPROS"; SECS=$(( $(date +%s) - T_PART )); fi
  record "bench-$1" "$RC" "$SECS" "$(grep -cE '^\| ' "$OUT/bench_$1.log") table lines in bench_$1.log$extra"
}

main_job() {  # PASSES (cold): a cold default kernel cache (a fresh KERNEL_ORACLE_CACHE); warm: then the same cache
  local cache="$STATE/ko-cache" pass heads="" saved=$TRITON_CACHE_DIR passes=("$@"); rm -rf "$cache"
  unset TRITON_CACHE_DIR; [ ${#passes[@]} -gt 0 ] || passes=(cold)
  for pass in "${passes[@]}"; do
    KERNEL_ORACLE_CACHE="$cache" timed main-job 300 "$OUT/main_job_$pass.log" \
      python3 -m kernel_oracle run --device cuda --time 120 --out "$STATE/main-job-$pass"
    cp "$STATE/main-job-$pass/latest.json" "$OUT/main_job_$pass.json" 2>/dev/null
    heads+="$pass: $(python3 - "$STATE/main-job-$pass/latest.json" 2>"$OUT/main_job_$pass.txt" <<'PY'
import json, sys
try:
    rec = json.load(open(sys.argv[1]))
except OSError:
    sys.exit(print("no record written"))
camps = rec.get("summary", {}).get("campaigns", [])
ws, todo = [], [rec]  # every warm-up record (a worker's warm-up, its parallel children) anywhere in the record
while todo:
    o = todo.pop(); vals = o.values() if isinstance(o, dict) else o if isinstance(o, list) else ()
    ws += [o["warm_up"]] if isinstance(o, dict) and isinstance(o.get("warm_up"), dict) else []; todo += list(vals)
for c in camps:
    print(f"   {c.get('target')} {c.get('family')}: {c.get('cases')} cases in {c.get('took_s')} s", file=sys.stderr)
tri = sum(c.get("cases", 0) for c in camps if c.get("target") == "triton" and c.get("family") == "lora")
vis = sum(c.get("cases", 0) for c in camps if c.get("family") == "vision")
pre = rec.get("summary", {}).get("precompile") or {}
print(f"{sum(c.get('cases', 0) for c in camps)} cases (triton lora {tri}, vision {vis}); warm-up "
      f"{sum(w.get('seconds', 0) for w in ws):.0f} s; beside: {pre.get('cases', 0)} cases compiled (the LoRA "
      f"campaign's stream, then variants) in {pre.get('processes', 0)} processes, {pre.get('seconds', 0):.0f} s")
PY
); "
    cat "$OUT/main_job_$pass.txt"; tail -2 "$OUT/main_job_$pass.log" | cut -c1-200; done
  export TRITON_CACHE_DIR=$saved; record main-job "$RC" "$SECS" "$heads"
}

matrix() {  # SGLang's release matrix: the three kv_b codes and csgmv under every configuration, and the vision wrapper;
  # stopped (SIGTERM) after LIMIT s it writes the columns that ran, with no fix claimed
  local secs=${1:-90} limit=${2:-330} wheel=(); [ -d .whl/sglang-slim ] && wheel=(--sglang-wheel "$PWD/.whl/sglang-slim")
  rm -rf "$STATE/matrix"
  timed matrix "$limit" "$OUT/matrix.log" python3 -m kernel_oracle matrix --targets sglang,sglang-trt,sglang-v2,sglang-csgmv,flashinfer-cudnn \
    --releases all --configurations all --op lora,vision,csgmv --device cuda --time "$secs" --quiet --out "$STATE/matrix" "${wheel[@]}"
  cp "$STATE/matrix/matrix.md" "$STATE/matrix/matrix.json" "$OUT/" 2>/dev/null
  tail -40 "$OUT/matrix.log" | cut -c1-240
  local head; head=$(python3 - "$STATE/matrix/matrix.json" <<'PY'
import json, sys
try:
    rec = json.load(open(sys.argv[1]))
except OSError:
    sys.exit(print("no matrix record written"))
m, s = rec.get("release_matrix", {}), rec.get("summary", {})
rows = m.get("rows", [])
f = rec.get("findings", [])
print(f"{s.get('columns')} columns, {s.get('campaigns')} campaigns, {s.get('replays')} replays, "
      f"{sum(g.get('cases', 0) for g in rec.get('groups', []))} cases, {len(rows)} rows; "
      f"{len(f)} findings, {sum(1 for x in f if x.get('known'))} known")
for c in m.get("releases", []):  # where each column's cases went: known issues (and skipped), validation gaps
    print(f"   column {c.get('spec')}: {c.get('cases')} cases, {c.get('known_cases', 0)} to known issues "
          f"({c.get('known_skipped', 0)} skipped), {c.get('validation_gaps', 0)} gaps", file=sys.stderr)
for r in rows:
    print(f"   {r.get('bucket', '')[:110]} | in {r.get('introduced_in')} | fixed {r.get('fixed_in')}", file=sys.stderr)
PY
)
  record matrix "$RC" "$SECS" "$head"
}

table() {
  echo "| phase | exit | seconds | result |"; echo "|---|---:|---:|---|"
  [ -f "$STATE/table.tsv" ] && awk -F'\t' '{ printf "| %s | %s | %s | %s |\n", $1, $2, $3, $4 }' "$STATE/table.tsv"
  cp "$STATE/table.tsv" "$OUT/table.tsv" 2>/dev/null; true
}

run_all() {  # the standard sequence; each entry: PHASE ESTIMATED_SECONDS (for the budget check); a suite stopped
  # at its limit (its row says suite-part) is run again by the next call before the phases after it
  local budget=${ALL_BUDGET:-570} secs=${1:-600} phase est left
  while read -r phase est <&3; do
    grep -q "^$phase"$'\t' "$STATE/table.tsv" 2>/dev/null && continue
    left=$(( budget - ($(date +%s) - T0) ))
    if [ "$phase" = suite ] && [ "$left" -gt 120 ]; then est=$(( left < 300 ? left : 300 )); fi
    if [ "$est" -gt "$left" ]; then
      echo "all: $phase would pass the ${budget}-s budget: call 'all' again to continue"; break
    fi
    case "$phase" in
      setup) setup ;;
      soak-start) soak_start "$secs" ;;
      suite) suite "$est"; grep -q "^suite"$'\t' "$STATE/table.tsv" || break ;;
      main-job) main_job cold ;;
      matrix) matrix 90 330 ;;
      soak-wait) soak_wait 120 ;;
      bench-*) bench_part "${phase#bench-}" ;;
    esac
  done 3<<'EOF'
setup 90
soak-start 5
suite 300
main-job 170
matrix 340
soak-wait 120
bench-repros 100
EOF
  table
}

case "${1:-}" in
  setup) setup ;;
  suite) shift; suite "${@:-300}" ;;
  soak-start) soak_start "${2:-600}" ;;
  soak-wait) soak_wait "${2:-600}" ;;
  bench) shift; parts=("$@"); [ ${#parts[@]} -eq 0 ] && parts=(lora vision sglang verdicts oracle)
         for p in "${parts[@]}"; do bench_part "$p"; done ;;
  main-job) shift; main_job "$@" ;;
  matrix) matrix "${2:-90}" "${3:-330}" ;;
  all) run_all "${2:-600}" ;;
  table) table ;;
  *) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 2 ;;
esac
