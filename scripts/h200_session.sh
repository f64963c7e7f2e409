#!/usr/bin/env bash
# The GPU verification session on the H200 (device tool), in phases; see docs/BENCHMARKS.md.
#
#   bash scripts/h200_session.sh setup          # offline installs: FlashInfer wheels, this checkout (editable)
#   bash scripts/h200_session.sh soak-start S   # detached S-second campaigns: triton lora/vision, sglang(-trt)==0.5.23
#   bash scripts/h200_session.sh suite          # the whole pytest suite, timed
#   bash scripts/h200_session.sh soak-wait      # wait for the soak campaigns, print their findings by bucket
#   bash scripts/h200_session.sh bars           # main job 120 s, campaign cases/s, SGLang and verdict scripts
#   bash scripts/h200_session.sh diag           # vision fp32 triage, compile counts, LoRA speed, bench cold/warm
#   bash scripts/h200_session.sh suite-par [S] [N] # the suite on N xdist workers, stopped after S s (durations)
#   bash scripts/h200_session.sh profile [S]    # cProfile of an in-process triton LoRA campaign
#   bash scripts/h200_session.sh final [S]      # LoRA speed; the plain suite (stopped after S s) beside the triage
#   bash scripts/h200_session.sh scale [S]      # issue 15.4: fuzz cases/s with --gpus 1 then 2 (4 shards of S s)
#   bash scripts/h200_session.sh verify [S]     # vision fp32 levels, an S-second soak of our kernels (detached), the suite
#   bash scripts/h200_session.sh recheck [S]    # F0003 repro, an S-second triton lora re-soak (then soak-wait), the suite
#   bash scripts/h200_session.sh s6a [S]        # F0003 repro, oracle bench cold/warm cache, an S-second triton lora soak (detached)
#   bash scripts/h200_session.sh s6b [T]        # soak-wait, then the suite alone (stopped after T s)
#   bash scripts/h200_session.sh soak-detached [S] # an S-second triton lora soak from an installed copy (then soak-wait)
#   bash scripts/h200_session.sh suite [T]      # the whole suite, stopped after T s
#   bash scripts/h200_session.sh s7a [S] [T]    # two GPUs: S-second triton lora soak on GPU 0, the suite on GPU 1
#   bash scripts/h200_session.sh s7b            # two GPUs: bench cold/warm on GPU 1; soak-wait, main job on GPU 0
#   bash scripts/h200_session.sh s7c [S] [T] [F]# two GPUs, split cores: triage a finding (F) + soak | suite, bench
#   bash scripts/h200_session.sh s7d            # two GPUs: soak-wait | the main job (after s7c)
#   bash scripts/h200_session.sh s8a            # decode A/B of the fused LoRA kernels, decode table, kernel tests
#   bash scripts/h200_session.sh s8c [S]        # two GPUs: triage + S-second soak (GPU 0) | oracle bench cold, kernel bench (GPU 1)
#   bash scripts/h200_session.sh s8d            # two GPUs: soak-wait | main job, then the suite (after s8c)
#   bash scripts/h200_session.sh s8e            # ours beside SGLang 0.5.23's LoRA kernels, do_bench_cudagraph
#   bash scripts/h200_session.sh s9a            # vision host cost, direct-launch tests, LoRA decode A/B 4, split diag, sweep
#   bash scripts/h200_session.sh s9b            # vision host cost, vision tests, LoRA decode floor, the vision table with the sweep
#   bash scripts/h200_session.sh s9c            # vision host cost (interleaved), this Triton's launcher sources
#   bash scripts/h200_session.sh s9d            # vision host cost, vision tests (slow too), the vision table
#   bash scripts/h200_session.sh s9e            # vision host cost; a 150-s vision fuzz beside the whole suite
#   bash scripts/h200_session.sh s9f            # LoRA decode floor + kernel tests, vision host cost, one campaign test
#   bash scripts/h200_session.sh s9g            # final code: vision host cost, the whole suite, an 80-s LoRA fuzz
#   bash scripts/h200_session.sh s10a .. s10g   # 2026-12-01: split-PV reduction, launch overhead, repeat shortcut,
#                                               # LoRA flat grid / wide tiles A/B, folded scale, final table + suite
#   bash scripts/h200_session.sh s10h | s10i    # prefill q: session 9's tree (old/) against this one; registers
#   bash scripts/h200_session.sh s11a           # warm-up cover test; LoRA floor/prefill old/ vs this (row search); decode A/B 6
#   bash scripts/h200_session.sh s11b           # LoRA decode A/B 7 + prefill A/B (eviction hints), LoRA kernel tests
#   bash scripts/h200_session.sh s11c           # LoRA prefill A/B 3 + decode A/B 8 (heads first, register caps)
#   bash scripts/h200_session.sh s11d           # chosen blocks: prefill/decode A/B; ncu on decode-bs64; LoRA tests
#   bash scripts/h200_session.sh s11e           # LoRA decode A/B 10 (small programs), prefill A/B 4, decode floor
#   bash scripts/h200_session.sh s11f           # LoRA prefill A/B 5 twice, decode floor (flat at 1.5x)
#   bash scripts/h200_session.sh s11g | s11h    # final code (after setup): suite + LoRA table | main job, A/B, floor, host
#   bash scripts/h200_session.sh s11i           # the main job twice: cold, then warm Triton cache
#   bash scripts/h200_session.sh s12a           # ncu source view (SASS stall samples) of decode-bs64 q and v
#   bash scripts/h200_session.sh s12b           # LoRA decode A/B 11 (whole-row prefetch), the s12a CSVs in one file
#   bash scripts/h200_session.sh s12c           # LoRA floor/prefill old/ vs this (rank-wide loads); decode A/B 11; tests
#   bash scripts/h200_session.sh s12d           # chosen q blocks: decode A/B 12, floor, prefill; LoRA + warm-up tests
#   bash scripts/h200_session.sh s12e | s12f    # final code (after setup): the suite | LoRA floor, prefill, vision host, main job
#   bash scripts/h200_session.sh s12g           # vision host cost: old/ (fd35994) vs this, interleaved twice
#   bash scripts/h200_session.sh s12h           # LoRA decode A/B 13 (per-slot grid variants)
#   bash scripts/h200_session.sh s14a           # LoRA decode A/B 14 (16/32-row tiles on the flat grid, META_FIRST, 8 warps), floor
#   bash scripts/h200_session.sh s14d           # LoRA decode A/B 14 again with PDL entries; the PDL and META_FIRST kernel tests
#   bash scripts/h200_session.sh s14e           # LoRA decode A/B 16 (register cap, pipelining depth)
#   bash scripts/h200_session.sh s14f           # LoRA decode A/B 17 (TILES_LAST, since removed: slower)
#   bash scripts/h200_session.sh s14g           # final code: LoRA decode floor, decode A/B 18, LoRA kernel tests
#   bash scripts/h200_session.sh s14h           # LoRA decode A/B 19 (heads per program; slower, removed)
#   bash scripts/h200_session.sh s14i           # final code: the PDL, META_FIRST, largest-shape and graph tests
#   bash scripts/h200_session.sh s14j           # after review: the PDL tests, the LoRA decode floor
#   bash scripts/h200_session.sh s14k           # after review: the LoRA kernel tests
#   bash scripts/h200_session.sh s14b | s14c    # final code (after setup): decode A/B 15 + the suite | LoRA floor, prefill rows, vision host + table, main job
#   bash scripts/h200_session.sh s15a .. s15e   # 2026-12-01: pipelined key loop, descriptor loads, split head dim + TMA
#   bash scripts/h200_session.sh s16a           # s15e again (vision tests, table twice, main job) + the sm_90 compile test
#   bash scripts/h200_session.sh s16b           # the split-head-dim and descriptor-load tests, the vision host cost twice
#   bash scripts/h200_session.sh s17a           # the warp-specialized key loop: its tests, the sweep
#   bash scripts/h200_session.sh s17b           # triton 3.6's Hopper warp specialization on a minimal attention
#   bash scripts/h200_session.sh s17c           # s17b, then s17a with the output stored through a descriptor
#   bash scripts/h200_session.sh s17d           # final code: s17b, the vision tests, the table and d128 WS twice, host cost
#   bash scripts/h200_session.sh s17f           # the WS loop on whole key blocks as the d128 default: tests, table, main job
#   bash scripts/h200_session.sh s17g           # final code: our kernel with the WS config (4 rounds), the vision tests
#   bash scripts/h200_session.sh s18a           # LoRA decode A/B 21 (PRE_WAIT: route, then weights, before the grid wait); WS NaN hunt
#   bash scripts/h200_session.sh s18b           # LoRA decode A/B 22 (blocks under PRE_WAIT); the WS hunt: toy, with neighbours, alone
#   bash scripts/h200_session.sh s18c           # LoRA decode A/B 23 (the flat grid under PRE_WAIT); the minimal WS kernel beside neighbours
#   bash scripts/h200_session.sh s18d           # final code: LoRA kernel tests, decode floor with and without early reads, A/B 24, WS tests
#   bash scripts/h200_session.sh s18e           # final code: main job, vision GPU tests, a 60-s LoRA fuzz under early reads
#   bash scripts/h200_session.sh s18f           # after review: the PDL and early-reads LoRA tests; the folded s17 toy script
#   bash scripts/h200_session.sh repro-split-pv # the split-PV reduction, each variant in its own process
#   bash scripts/h200_session.sh probe [N]      # main job alone, vision fp32 levels (N draws) + timing, profiles
#
# Carry: .whl/flashinfer and .whl/sglang-slim (and .whl/cluster, dask + distributed wheels, for scale); scripts/gpu_snapshot.sh
# builds the carried .gpu-snap.  Results go to $OUT (the device tool's folder) or ./gpu-out.
set -uo pipefail
cd "$(dirname "$0")/.."
# a snapshot of scripts/gpu_snapshot.sh names its commit (results would otherwise name the copy's stale .git)
if [ -f COMMIT ]; then export KERNEL_ORACLE_GIT_COMMIT; KERNEL_ORACLE_GIT_COMMIT=$(cat COMMIT); fi
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/triton-cache}
export KERNEL_ORACLE_SGLANG_WHEEL=${KERNEL_ORACLE_SGLANG_WHEEL:-$PWD/.whl/sglang-slim}
SOAK=/tmp/soak
ko() { python3 -m kernel_oracle.cli "$@"; }
main_job() {  # the README's main job on the GPU, 120 s, and its fuzz cases per campaign
  ko run --device cuda --time-budget 120 --out /tmp/main-job >"$OUT/main_job.log" 2>&1; echo "main job exit $?"
  python3 - <<'PY'
import json
s = json.load(open("/tmp/main-job/latest.json"))
camps = s.get("summary", {}).get("campaigns", [])
print("main job fuzz cases:", sum(c.get("cases", 0) for c in camps), "campaigns:",
      [(c.get("target"), c.get("family"), c.get("cases"), c.get("took_s"), c.get("share_s"), c.get("problem")) for c in camps])
PY
  tail -4 "$OUT/main_job.log"
}

vision_gpu_tests() {  # LOG: the vision GPU tests (kernel, direct launch, repeat shortcut, FlashInfer; slow included)
  timeout 240 python3 -m pytest oracle_tests/test_kernels_vision.py oracle_tests/test_direct_launch.py \
    oracle_tests/test_repeated_call.py oracle_tests/test_flashinfer_cudnn.py -q -n 8 -p no:cacheprovider --run-slow \
    >"$1" 2>&1; echo "vision tests exit $?"; tail -1 "$1"
  grep -E "^(FAILED|ERROR)" "$1" | head -8
}

lora_ab() {  # MODE (decode|prefill) T [TAG]: bench_lora --MODE-ab, T seconds; one compact line per configuration
  local mode=$1 t=$2 tag=${3:-}
  timeout "$t" python3 -m kernel_oracle.benchmarks.bench_lora --"$mode"-ab --json "$OUT/${mode}_ab$tag.json" \
    >"$OUT/${mode}_ab$tag.log" 2>&1; echo "$mode ab$tag exit $?"
  grep "decode ab" "$OUT/${mode}_ab$tag.log" | sed -e "s/'C_SPLIT': None, //; s/'check': 'ok', //; \
    s/'PREFETCH': True, //; s/'HEADS_FIRST': True, //; s/decode ab {'shape': //; s/'route': 'auto', //" | cut -c1-170
}
lora_floor() {  # ROUTES...: bench_lora --decode-floor (the fused decode calls beside their launch + route floor)
  timeout 80 python3 -m kernel_oracle.benchmarks.bench_lora --decode-floor --routes "$@" \
    --json "$OUT/decode_floor.json" >"$OUT/decode_floor.log" 2>&1; echo "decode floor exit $?"
  grep "^| decode" "$OUT/decode_floor.log" | cut -c1-100
}
lora_tests() {  # [T]: the LoRA kernel tests on 12 xdist workers
  timeout "${1:-200}" python3 -m pytest oracle_tests/test_kernels_lora.py -q -x -n 12 -p no:cacheprovider \
    >"$OUT/lora_tests.log" 2>&1; echo "lora kernel tests exit $?"; tail -2 "$OUT/lora_tests.log" | cut -c1-300
}

case "${1:-}" in
  setup)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      .whl/flashinfer/*.whl || exit 2
    python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || exit 2
    python3 -c "import torch, triton, kernel_oracle; print('setup:', torch.__version__, triton.__version__, \
kernel_oracle.__version__, torch.cuda.get_device_name())"
    ;;
  soak-start)
    secs=${2:-600}; mkdir -p $SOAK
    start() {  # name, args...
      local name=$1; shift
      setsid nohup python3 -m kernel_oracle.cli fuzz "$@" --device cuda --time "$secs" --seed 7 --no-progress \
        --out "$SOAK/$name" >"$SOAK/$name.log" 2>&1 < /dev/null & echo "soak $name started"
    }
    start triton-lora --target triton --op lora
    start triton-vision --target triton --op vision
    start sglang-0.5.23 --target sglang==0.5.23 --op lora --upstream-contracts-only
    start sglang-trt-0.5.23 --target sglang-trt==0.5.23 --op lora --upstream-contracts-only
    ;;
  suite)
    start=$(date +%s)
    timeout "${2:-560}" python3 -m pytest oracle_tests -q -p no:cacheprovider --durations=30 -rfEs \
      >"$OUT/suite.log" 2>&1; rc=$?
    echo "suite: rc=$rc in $(( $(date +%s) - start )) s"; grep -E "passed|failed|error" "$OUT/suite.log" | tail -3
    grep -E "^(FAILED|ERROR)" "$OUT/suite.log" | head -30
    ;;
  soak-wait)
    for i in $(seq 1 "${2:-120}"); do
      running=$(pgrep -f "kernel_oracle.cli fuzz" | wc -l); [ "$running" -eq 0 ] && break; sleep 5
    done
    tar czf "$OUT/soak.tgz" -C /tmp soak 2>/dev/null
    python3 - <<'PY'
import json, pathlib
for d in sorted(p for p in pathlib.Path("/tmp/soak").iterdir() if p.is_dir()):
    s = json.loads((d / "summary.json").read_text()) if (d / "summary.json").exists() else {}
    c = s.get("campaign", {})
    f = s.get("findings", [])
    print(f"soak {d.name}: cases={c.get('executed')} elapsed={c.get('elapsed_s')} status={c.get('status')} "
          f"findings={len(f)} known={sum(1 for x in f if x.get('known'))}")
    for x in f:
        print(f"   {x.get('kind')} {x.get('op')} {x.get('dtype')} known={x.get('known')} :: {str(x.get('message'))[:160]}")
PY
    tail -2 $SOAK/*.log
    ;;
  bars)
    main_job
    ko bench --device cuda --targets triton,reference --seconds 15 --main-budget 0 --out "$OUT/oracle_bench.json" \
      >"$OUT/bench.log" 2>&1; echo "bench exit $?"; tail -15 "$OUT/bench.log"
    timeout 200 python3 -m kernel_oracle.benchmarks.sglang_gpu --wheels .whl/sglang-slim --json "$OUT/sglang_gpu.json" \
      >"$OUT/sglang_gpu.log" 2>&1; echo "sglang_gpu exit $?"; tail -25 "$OUT/sglang_gpu.log"
    timeout 150 python3 -m kernel_oracle.benchmarks.gpu_verdicts --json "$OUT/gpu_verdicts.json" \
      >"$OUT/gpu_verdicts.log" 2>&1; echo "gpu_verdicts exit $?"; tail -20 "$OUT/gpu_verdicts.log"
    ;;
  diag)  # about 250 s: the bench (cold then warm Triton cache), vision fp32 triage, compile counts, LoRA speed
    for pass in cold warm; do
      TRITON_CACHE_DIR=/tmp/triton-bench timeout 80 python3 -m kernel_oracle.cli bench --device cuda \
        --targets triton,reference --seconds 8 --main-budget 0 --out "$OUT/oracle_bench_$pass.json" \
        >"$OUT/bench_$pass.log" 2>&1; echo "bench ($pass Triton cache) exit $?"; tail -5 "$OUT/bench_$pass.log"
    done
    timeout 70 python3 -m kernel_oracle.benchmarks.triage_vision_fp32 --draws "${2:-120}" >"$OUT/triage.log" 2>&1
    echo "triage exit $?"; grep -E "failing|FAIL" "$OUT/triage.log" | head -20
    timeout 60 python3 -m kernel_oracle.benchmarks.gpu_verdicts --parts c --cases 40 --json "$OUT/gpu_verdicts_c.json" \
      >"$OUT/gpu_verdicts_c.log" 2>&1; echo "gpu_verdicts c exit $?"; tail -5 "$OUT/gpu_verdicts_c.log"
    timeout 45 python3 -m kernel_oracle.benchmarks.bench_lora --shapes prefill-8x2048 decode-bs64 \
      >"$OUT/bench_lora.log" 2>&1; echo "bench_lora exit $?"; tail -14 "$OUT/bench_lora.log"
    ;;
  profile)
    timeout 100 python3 -m kernel_oracle.benchmarks.profile_campaign --target triton --op lora --device cuda \
      --seconds "${2:-15}" >"$OUT/profile_triton_lora.log" 2>&1; echo "profile exit $?"; head -1 "$OUT/profile_triton_lora.log"
    ;;
  suite-par)  # the suite on pytest-xdist workers (pinned one GPU each), interrupted after S s with its durations
    start=$(date +%s)
    timeout -s INT "${2:-300}" python3 -m pytest oracle_tests -q -p no:cacheprovider -n "${3:-12}" --durations=80 -rfEs \
      >"$OUT/suite_par.log" 2>&1; rc=$?
    echo "suite-par: rc=$rc in $(( $(date +%s) - start )) s"; grep -E "passed|failed|error" "$OUT/suite_par.log" | tail -3
    grep -E "^(FAILED|ERROR)" "$OUT/suite_par.log" | head -30
    ;;
  final)  # LoRA speed alone, then the plain suite (auto xdist workers) beside the vision fp32 triage
    timeout 40 python3 -m kernel_oracle.benchmarks.bench_lora --shapes ${SHAPES:-prefill-8x2048 decode-bs64} \
      >"$OUT/bench_lora_final.log" 2>&1; echo "bench_lora exit $?"; tail -14 "$OUT/bench_lora_final.log"
    (CUDA_VISIBLE_DEVICES=1 timeout 120 python3 -m kernel_oracle.benchmarks.triage_vision_fp32 --draws 100 \
      docs/benchmarks/data/soak_h200_2026-11-30/triton-vision.summary.json \
      docs/benchmarks/data/h200_2026-11-30_pm/soak/triton-vision.summary.json \
      >"$OUT/triage_final.log" 2>&1; echo "triage exit $?" >>"$OUT/triage_final.log") &
    start=$(date +%s)
    timeout -s INT "${2:-230}" python3 -m pytest oracle_tests -p no:cacheprovider --durations=30 -rfEs \
      >"$OUT/suite_final.log" 2>&1; rc=$?
    echo "suite (python -m pytest oracle_tests): rc=$rc in $(( $(date +%s) - start )) s"
    grep -E "xdist workers|created:" "$OUT/suite_final.log" | head -2
    grep -E "passed|failed" "$OUT/suite_final.log" | tail -2; grep -E "^(FAILED|ERROR)" "$OUT/suite_final.log" | head -20
    wait; grep -E "failing|FAIL|exit" "$OUT/triage_final.log" | head -20
    ;;
  probe)  # the main job alone (cold cache), vision fp32 arithmetic levels, GPU vision tests, profiles
    main_job
    timeout 170 python3 -m kernel_oracle.benchmarks.triage_vision_fp32 --time --draws "${2:-40}" \
      docs/benchmarks/data/soak_h200_2026-11-30/triton-vision.summary.json \
      docs/benchmarks/data/h200_2026-11-30_pm/soak/triton-vision.summary.json >"$OUT/triage_levels.log" 2>&1
    echo "triage exit $?"; grep -E "^fp32|failing|raised" "$OUT/triage_levels.log" | head -20
    timeout 100 python3 -m pytest oracle_tests/test_kernels_vision.py -q -p no:cacheprovider -x \
      >"$OUT/vision_tests.log" 2>&1; echo "vision tests exit $?"; tail -2 "$OUT/vision_tests.log"
    for t in triton reference; do
      timeout 80 python3 -m kernel_oracle.benchmarks.profile_campaign --target $t --op lora --device cuda \
        --seconds 12 >"$OUT/profile_${t}_lora.log" 2>&1; echo "profile $t exit $?"; head -3 "$OUT/profile_${t}_lora.log"
    done
    ;;
  verify)  # vision fp32 levels first (the soak runs the best), then a soak of our kernels beside the suite
    timeout 120 python3 -m kernel_oracle.benchmarks.triage_vision_fp32 --draws 40 \
      docs/benchmarks/data/soak_h200_2026-11-30/triton-vision.summary.json \
      docs/benchmarks/data/h200_2026-11-30_pm/soak/triton-vision.summary.json >"$OUT/triage_levels.log" 2>&1
    echo "triage exit $?"; grep -E "failing|raised" "$OUT/triage_levels.log" | head -8
    level=$(python3 - "$OUT/triage_levels.log" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
saved = {int(a): int(b) for a, b in re.findall(r"exact=(\d) (\d+)", t.split("saved problems failing:")[-1].splitlines()[0])}
fresh = {int(a): int(b) for a, b in re.findall(r"fresh draws failing with exact=(\d): (\d+)", t)}
ok = [lv for lv in sorted(saved) if saved[lv] == 0 and fresh.get(lv, 1) == 0]
print(ok[0] if ok else 1)
PY
)
    export KERNEL_ORACLE_VISION_FP32_EXACT=$level; echo "soak with KERNEL_ORACLE_VISION_FP32_EXACT=$level"
    mkdir -p $SOAK; secs=${2:-600}
    for op in lora vision; do
      setsid nohup python3 -m kernel_oracle.cli fuzz --target triton --op $op --device cuda --time "$secs" --seed 11 \
        --no-progress --out "$SOAK/triton-$op" >"$SOAK/triton-$op.log" 2>&1 < /dev/null &
    done
    env -u KERNEL_ORACLE_VISION_FP32_EXACT timeout 300 python3 -m pytest oracle_tests -p no:cacheprovider --durations=30 -rfEs \
      >"$OUT/suite.log" 2>&1; echo "suite rc=$?"; grep -E "passed|failed" "$OUT/suite.log" | tail -1
    grep -E "^(FAILED|ERROR)" "$OUT/suite.log" | head -20
    ;;
  final5)  # the main job alone (cold cache), the campaign bench, the changed tests on the GPU, fp32 vision timing
    main_job; cp /tmp/main-job/latest.json "$OUT/main_job.json" 2>/dev/null
    timeout 150 python3 -m kernel_oracle.cli bench --device cuda --targets triton,reference --seconds 20 \
      --main-budget 0 --out "$OUT/oracle_bench.json" >"$OUT/bench.log" 2>&1; echo "bench exit $?"; tail -8 "$OUT/bench.log"
    timeout 160 python3 -m pytest -p no:cacheprovider -rfEs oracle_tests/test_kernels_lora.py \
      oracle_tests/test_reference_lora.py oracle_tests/test_precompile.py oracle_tests/test_campaign_ci.py \
      oracle_tests/test_faults_campaign.py oracle_tests/test_kernels_vision.py oracle_tests/test_mutants.py \
      >"$OUT/tests.log" 2>&1; echo "tests rc=$?"; grep -E "passed|failed" "$OUT/tests.log" | tail -1
    grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -10
    timeout 60 python3 -m kernel_oracle.benchmarks.triage_vision_fp32 --time --exact 0 2 --draws 0 \
      >"$OUT/vision_fp32_time.log" 2>&1; echo "fp32 timing exit $?"; grep -E "^fp32|failing" "$OUT/vision_fp32_time.log"
    ;;
  recheck)  # next session's first call: F0003 outside the suite, the LoRA re-soak (detached), the whole suite
    timeout 60 python3 -m kernel_oracle.benchmarks.repro_flashinfer_ragged_v >"$OUT/repro_f0003.log" 2>&1
    echo "repro F0003 exit $?"; cat "$OUT/repro_f0003.log"
    mkdir -p $SOAK
    setsid nohup python3 -m kernel_oracle.cli fuzz --target triton --op lora --device cuda --time "${2:-600}" --seed 11 \
      --no-progress --out "$SOAK/triton-lora" >"$SOAK/triton-lora.log" 2>&1 < /dev/null &
    timeout 300 python3 -m pytest oracle_tests -p no:cacheprovider --durations=30 -rfEs >"$OUT/suite.log" 2>&1
    echo "suite rc=$?"; grep -E "passed|failed" "$OUT/suite.log" | tail -1; grep -E "^(FAILED|ERROR)" "$OUT/suite.log" | head -20
    ;;
  s6a)  # F0003 outside the suite; the oracle bench on a cold, then a warm Triton cache (variant warm-up); the soak
    timeout 60 python3 -m kernel_oracle.benchmarks.repro_flashinfer_ragged_v >"$OUT/repro_f0003.log" 2>&1
    echo "repro F0003 exit $?"; tail -12 "$OUT/repro_f0003.log"
    for pass in cold warm; do
      TRITON_CACHE_DIR=/tmp/triton-s6 timeout 220 python3 -m kernel_oracle.cli bench --device cuda \
        --targets triton,reference --seconds 20 --main-budget 0 --out "$OUT/oracle_bench_$pass.json" \
        >"$OUT/bench_$pass.log" 2>&1; echo "bench $pass exit $?"; tail -6 "$OUT/bench_$pass.log" | cut -c1-400
    done
    mkdir -p $SOAK
    TRITON_CACHE_DIR=/tmp/triton-s6 setsid nohup python3 -m kernel_oracle.cli fuzz --target triton --op lora \
      --device cuda --time "${2:-600}" --seed 11 --warm-up 120 --no-progress --out "$SOAK/triton-lora" \
      >"$SOAK/triton-lora.log" 2>&1 < /dev/null &
    echo "soak started"
    ;;
  soak-detached)  # an S-second triton lora soak run from an installed copy, so the next call's fresh tree cannot break it
    rm -rf /tmp/ko-src /tmp/ko-soak-site && mkdir -p /tmp/ko-src && tar --exclude=./.whl -cf - . | tar -xf - -C /tmp/ko-src
    python3 -m pip install -q --no-deps --no-build-isolation --no-compile --target /tmp/ko-soak-site /tmp/ko-src \
      >/dev/null 2>&1 || { echo "soak copy: install failed"; exit 2; }
    mkdir -p $SOAK
    (cd /tmp && PYTHONPATH=/tmp/ko-soak-site:/tmp/site TRITON_CACHE_DIR=/tmp/triton-s6 setsid nohup python3 -m \
      kernel_oracle.cli fuzz --target triton --op lora --device cuda --time "${2:-600}" --seed 11 --warm-up 120 \
      --no-progress --out "$SOAK/triton-lora" >"$SOAK/triton-lora.log" 2>&1 < /dev/null &)
    echo "soak started from /tmp/ko-soak-site"
    ;;
  s7a)  # two GPUs: the S-second triton lora soak on GPU 0 (detached), the whole suite alone on GPU 1
    CUDA_VISIBLE_DEVICES=0 bash "$0" soak-detached "${2:-600}"
    CUDA_VISIBLE_DEVICES=1 bash "$0" suite "${3:-540}"
    ;;
  s8a)  # one GPU: decode A/B of the fused LoRA kernels (oracle-checked, do_bench_cudagraph), decode table, kernel tests
    timeout 240 python3 -m kernel_oracle.benchmarks.bench_lora --decode-ab --json "$OUT/decode_ab.json" \
      >"$OUT/decode_ab.log" 2>&1; echo "decode ab exit $?"; grep -A80 "^| shape | op" "$OUT/decode_ab.log" | cut -c1-260
    timeout 100 python3 -m kernel_oracle.benchmarks.bench_lora --shapes decode-bs64 decode-bs256 \
      --json "$OUT/bench_decode.json" >"$OUT/bench_decode.log" 2>&1; echo "bench decode exit $?"
    tail -18 "$OUT/bench_decode.log"
    timeout 200 python3 -m pytest oracle_tests/test_kernels_lora.py -q -x -n 12 -p no:cacheprovider \
      -k "routes_match or prefetch or realistic or graph or matches_oracle" >"$OUT/kernel_tests.log" 2>&1
    echo "kernel tests exit $?"; tail -4 "$OUT/kernel_tests.log" | cut -c1-300
    ;;
  s8b)  # one GPU: the decode A/B only (round 2)
    timeout 240 python3 -m kernel_oracle.benchmarks.bench_lora --decode-ab --json "$OUT/decode_ab.json" \
      >"$OUT/decode_ab.log" 2>&1; echo "decode ab exit $?"; grep -A80 "^floor" "$OUT/decode_ab.log" | cut -c1-220
    ;;
  s8c)  # two GPUs, cores split. GPU 0: soak 2's finding triaged, then the 10-min soak (cores 0-11).
        # GPU 1 (cores 12-31): the oracle bench on a cold cache, then the kernel bench table
    pin() { local cores=$1; shift; if command -v taskset >/dev/null; then taskset -c "$cores" "$@"; else "$@"; fi; }
    CUDA_VISIBLE_DEVICES=0 timeout 60 python3 -m kernel_oracle.benchmarks.triage_lora_finding \
      docs/benchmarks/data/h200_2026-11-30_s7/soak2_triton_lora_findings.jsonl --top 4 >"$OUT/triage_soak2.log" 2>&1
    echo "triage exit $?"; tail -8 "$OUT/triage_soak2.log" | cut -c1-300
    CUDA_VISIBLE_DEVICES=0 pin 0-11 bash "$0" soak-detached "${2:-600}"
    export CUDA_VISIBLE_DEVICES=1
    TRITON_CACHE_DIR=/tmp/triton-s8 pin 12-31 timeout 330 python3 -m kernel_oracle.cli bench --device cuda \
      --targets triton,reference --seconds 15 --main-budget 0 --out "$OUT/oracle_bench_cold.json" \
      >"$OUT/bench_cold.log" 2>&1; echo "bench (cold cache) exit $?"; tail -8 "$OUT/bench_cold.log" | cut -c1-300
    pin 12-31 timeout 150 python3 -m kernel_oracle.benchmarks.bench_lora --json "$OUT/bench_lora.json" \
      >"$OUT/bench_lora.log" 2>&1; echo "bench_lora exit $?"; tail -28 "$OUT/bench_lora.log"
    ;;
  s8d)  # two GPUs: the soak's end (GPU 0); the main job on the bench's cache, then the suite (GPU 1, cores 12-31)
    (export CUDA_VISIBLE_DEVICES=1 TRITON_CACHE_DIR=/tmp/triton-s8
     taskset -c 12-31 bash "$0" main-job-only >"$OUT/main_job_summary.log" 2>&1
     taskset -c 12-31 bash "$0" suite 400 >"$OUT/suite_summary.log" 2>&1) &
    bash "$0" soak-wait 125; rm -f "$OUT/soak.tgz"
    cp /tmp/soak/triton-lora/summary.json "$OUT/soak_summary.json" 2>/dev/null
    cp /tmp/soak/triton-lora/findings.jsonl "$OUT/soak_findings.jsonl" 2>/dev/null
    tail -3 /tmp/soak/triton-lora.log | cut -c1-300
    wait; cat "$OUT/main_job_summary.log" "$OUT/suite_summary.log" | cut -c1-600
    ;;
  s8e)  # one GPU: ours beside SGLang 0.5.23's kernels (both variants), do_bench and do_bench_cudagraph
    timeout 300 python3 -m kernel_oracle.benchmarks.sglang_gpu --wheels .whl/sglang-slim --bench-only \
      --json "$OUT/sglang_side_by_side.json" >"$OUT/sglang_side_by_side.log" 2>&1; echo "side by side exit $?"
    grep -A60 "^| target" "$OUT/sglang_side_by_side.log"
    ;;
  s8f)  # one GPU: the prefill A/B of the fused LoRA kernels (segment-major configurations)
    timeout 300 python3 -m kernel_oracle.benchmarks.bench_lora --prefill-ab --json "$OUT/prefill_ab.json" \
      >"$OUT/prefill_ab.log" 2>&1; echo "prefill ab exit $?"; grep -A40 "^floor" "$OUT/prefill_ab.log" | cut -c1-220
    ;;
  s8g)  # one GPU: the vision entry point's host cost per call (warm call, planned launch, bare launch)
    timeout 120 python3 -m kernel_oracle.benchmarks.bench_vision --host --json "$OUT/vision_host.json" \
      >"$OUT/vision_host.log" 2>&1; echo "vision host exit $?"; tail -8 "$OUT/vision_host.log"
    ;;
  s9a)  # one GPU: vision host cost (direct launch vs JIT), direct-launch + vision cache tests, LoRA decode A/B
        # round 4, the split-head-dim diagnosis, the vision sweep (warp specialization) on two shapes
    timeout 120 python3 -m kernel_oracle.benchmarks.bench_vision --host --json "$OUT/vision_host.json" \
      >"$OUT/vision_host.log" 2>&1; echo "vision host exit $?"; tail -10 "$OUT/vision_host.log" | cut -c1-300
    timeout 150 python3 -m pytest oracle_tests/test_direct_launch.py oracle_tests/test_kernels_vision.py -q -x \
      -p no:cacheprovider -n 8 >"$OUT/vision_tests.log" 2>&1; echo "vision tests exit $?"; tail -4 "$OUT/vision_tests.log" | cut -c1-300
    timeout 200 python3 -m kernel_oracle.benchmarks.bench_lora --decode-ab --json "$OUT/decode_ab.json" \
      >"$OUT/decode_ab.log" 2>&1; echo "decode ab exit $?"; grep "decode ab" "$OUT/decode_ab.log" | cut -c1-260
    timeout 100 python3 -m kernel_oracle.benchmarks.diag_vision --only \
      split_pv_only_64_80,split_pv_b32_64_80,split_pv_64_80_bm64,split80_b32,split72_b32 2>&1 | tee "$OUT/diag.log" | cut -c1-300
    timeout 200 python3 -m kernel_oracle.benchmarks.bench_vision --sweep --shapes "2x16384,8 ragged images" \
      --json "$OUT/vision_sweep.json" >"$OUT/vision_sweep.log" 2>&1; echo "vision sweep exit $?"
    bash "$0" sweep-table "$OUT/vision_sweep.json"
    ;;
  s9b)  # one GPU: vision host cost, direct-launch + vision kernel tests, the vision table with the sweep (4 shapes)
    timeout 120 python3 -m kernel_oracle.benchmarks.bench_vision --host --json "$OUT/vision_host.json" \
      >"$OUT/vision_host.log" 2>&1; echo "vision host exit $?"; tail -10 "$OUT/vision_host.log" | cut -c1-300
    timeout 200 python3 -m pytest oracle_tests/test_direct_launch.py oracle_tests/test_kernels_vision.py -q \
      -p no:cacheprovider -n 8 >"$OUT/vision_tests.log" 2>&1; echo "vision tests exit $?"; tail -4 "$OUT/vision_tests.log" | cut -c1-300
    timeout 60 python3 -m kernel_oracle.benchmarks.bench_lora --decode-floor --json "$OUT/decode_floor.json" \
      >"$OUT/decode_floor.log" 2>&1; echo "decode floor exit $?"; grep "decode floor" "$OUT/decode_floor.log"
    timeout 330 python3 -m kernel_oracle.benchmarks.bench_vision --sweep --json "$OUT/vision_sweep.json" \
      >"$OUT/vision_sweep.log" 2>&1; echo "vision sweep exit $?"; bash "$0" sweep-table "$OUT/vision_sweep.json"
    ;;
  s9c)  # one GPU: the vision host cost (interleaved rounds); this Triton's launcher sources, for the direct launch
    timeout 200 python3 -m kernel_oracle.benchmarks.bench_vision --host --json "$OUT/vision_host.json" \
      >"$OUT/vision_host.log" 2>&1; echo "vision host exit $?"; tail -12 "$OUT/vision_host.log" | cut -c1-300
    python3 -c "import triton.backends.nvidia.driver as d, triton.compiler.compiler as c, triton.runtime.jit as j, shutil
for m in (d, c, j): shutil.copy(m.__file__, '$OUT/' + m.__name__.replace('.', '_') + '.py')"
    ls "$OUT"
    ;;
  s9d)  # one GPU: vision host cost, direct-launch + vision tests, the vision table (4 shapes, new defaults)
    timeout 200 python3 -m kernel_oracle.benchmarks.bench_vision --host --json "$OUT/vision_host.json" \
      >"$OUT/vision_host.log" 2>&1; echo "vision host exit $?"; tail -12 "$OUT/vision_host.log" | cut -c1-300
    timeout 200 python3 -m pytest oracle_tests/test_direct_launch.py oracle_tests/test_kernels_vision.py -q \
      -p no:cacheprovider -n 8 --run-slow >"$OUT/vision_tests.log" 2>&1; echo "vision tests exit $?"; tail -4 "$OUT/vision_tests.log" | cut -c1-300
    timeout 200 python3 -m kernel_oracle.benchmarks.bench_vision --json "$OUT/vision_table.json" \
      >"$OUT/vision_table.log" 2>&1; echo "vision table exit $?"; tail -12 "$OUT/vision_table.log" | cut -c1-400
    ;;
  s9e)  # one GPU: vision host cost; a 150-s fuzz of our vision kernel (background) beside the whole suite
    timeout 200 python3 -m kernel_oracle.benchmarks.bench_vision --host --json "$OUT/vision_host.json" \
      >"$OUT/vision_host.log" 2>&1; echo "vision host exit $?"; tail -12 "$OUT/vision_host.log" | cut -c1-300
    mkdir -p "$SOAK"
    (setsid nohup python3 -m kernel_oracle.cli fuzz --target triton --op vision --device cuda --time 150 --seed 12 \
      --no-progress --out "$SOAK/triton-vision" >"$SOAK/triton-vision.log" 2>&1 < /dev/null &)
    bash "$0" suite 420
    bash "$0" soak-wait 40; rm -f "$OUT/soak.tgz"; tail -3 "$SOAK/triton-vision.log" | cut -c1-300
    ;;
  s9f)  # one GPU: LoRA decode floor (the route's scan skipped by empty tiles), LoRA kernel tests, vision host cost,
        # the campaign-sharing test again alone
    timeout 60 python3 -m kernel_oracle.benchmarks.bench_lora --decode-floor --json "$OUT/decode_floor.json" \
      >"$OUT/decode_floor.log" 2>&1; echo "decode floor exit $?"; grep "decode floor" "$OUT/decode_floor.log"
    timeout 200 python3 -m pytest oracle_tests/test_kernels_lora.py -q -x -n 12 -p no:cacheprovider \
      -k "routes_match or prefetch or realistic or graph or matches_oracle" >"$OUT/kernel_tests.log" 2>&1
    echo "lora kernel tests exit $?"; tail -2 "$OUT/kernel_tests.log" | cut -c1-300
    timeout 200 python3 -m kernel_oracle.benchmarks.bench_vision --host --json "$OUT/vision_host.json" \
      >"$OUT/vision_host.log" 2>&1; echo "vision host exit $?"; tail -12 "$OUT/vision_host.log" | cut -c1-300
    timeout 120 python3 -m pytest oracle_tests/test_faults_campaign.py -q -p no:cacheprovider \
      -k campaigns_share_one_warm_worker 2>&1 | tail -2
    ;;
  s9g)  # one GPU, the final code: vision host cost, the whole suite, then an 80-s fuzz of our LoRA kernels
    timeout 200 python3 -m kernel_oracle.benchmarks.bench_vision --host --json "$OUT/vision_host.json" \
      >"$OUT/vision_host.log" 2>&1; echo "vision host exit $?"; tail -12 "$OUT/vision_host.log" | cut -c1-300
    bash "$0" suite 360
    timeout 150 python3 -m kernel_oracle.cli fuzz --target triton --op lora --device cuda --time 80 --seed 13 \
      --no-progress --out "$SOAK/triton-lora" >"$SOAK/triton-lora.log" 2>&1 < /dev/null; echo "lora fuzz exit $?"
    cp "$SOAK/triton-lora/summary.json" "$OUT/lora_fuzz_summary.json" 2>/dev/null; tail -12 "$SOAK/triton-lora.log" | cut -c1-200
    ;;
  s11a)  # one GPU: the variant warm-up cover test (fixed in bf3197f, not yet run on a GPU); LoRA decode floor and
         # prefill rows at the previous tree (old/: git archive ea1289a) and this one (Note [Row search]),
         # interleaved; the decode A/B round 6 at this tree
    for round in 1 2; do
      for tree in old .; do
        (cd "$tree" && python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 && \
         timeout 90 python3 -m kernel_oracle.benchmarks.bench_lora --decode-floor --routes auto 2>&1 | \
           grep "^| decode" | cut -c1-100 | sed "s|^|$tree round $round: |"
         [ "$round" = 1 ] && timeout 80 python3 -m kernel_oracle.benchmarks.bench_lora --shapes prefill-8x2048 2>&1 | \
           grep "prefill-8x2048 | [qv] | fused" | cut -c1-120 | sed "s|^|$tree: |")
      done
    done
    python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
    lora_ab decode 150
    timeout 120 python3 -m pytest oracle_tests/test_variant_warmup.py -q -x -p no:cacheprovider \
      >"$OUT/warmup_test.log" 2>&1; echo "variant warm-up test exit $?"; tail -3 "$OUT/warmup_test.log" | cut -c1-300
    ;;
  s11b)  # one GPU: LoRA decode A/B round 7 and prefill A/B (eviction hints, pipelining, tile heights), the LoRA
         # kernel tests (the row search on the GPU)
    lora_ab decode 200; lora_ab prefill 150; lora_tests 200
    ;;
  s11c)  # one GPU: LoRA prefill A/B round 3 and decode A/B round 8 (HEADS_FIRST, register caps), profilers present?
    which ncu nsys 2>&1 | head -3; ls /usr/local/cuda*/bin 2>/dev/null | grep -i "ncu\|nsys\|nsight" | head -3
    lora_ab prefill 200; lora_ab decode 150
    ;;
  s12b)  # LoRA decode A/B 11 (whole-row prefetch for q); the source-view CSVs of s12a, packed in one file
    lora_ab decode 240
    mkdir -p /tmp/csv
    for side in q v; do
      timeout 150 ncu --target-processes all -k regex:fused_kernel --launch-skip 12 --launch-count 1 --set full \
        --import-source no -f -o /tmp/ncu_$side python3 -m kernel_oracle.benchmarks.diag_lora_decode --side $side \
        >/tmp/csv/ncu_$side.log 2>&1; echo "ncu $side exit $?"
      ncu -i /tmp/ncu_$side.ncu-rep --page source --csv --print-source sass >/tmp/csv/sass_$side.csv 2>&1
    done
    tar -czf "$OUT/sass_csv.tgz" -C /tmp/csv .
    ;;
  s12c)  # LoRA decode floor + prefill rows at the previous tree (old/) and this one (Note [Rank-wide loads]),
         # interleaved twice; decode A/B 11 at this tree; the LoRA kernel tests
    for round in 1 2; do
      for tree in old .; do
        (cd "$tree" && python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 && \
         timeout 90 python3 -m kernel_oracle.benchmarks.bench_lora --decode-floor --routes auto 2>&1 | \
           grep "^| decode" | cut -c1-100 | sed "s|^|$tree round $round: |"
         timeout 80 python3 -m kernel_oracle.benchmarks.bench_lora --shapes prefill-8x2048 2>&1 | \
           grep "prefill-8x2048 | [qv] | fused" | cut -c1-120 | sed "s|^|$tree round $round: |")
      done
    done
    python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
    lora_ab decode 200; lora_tests 200
    ;;
  s12d)  # the chosen q blocks (whole-row prefetch on 32-row tiles, rank-wide loads): decode A/B 12, floor, prefill
         # rows; the LoRA kernel tests and the variant warm-up cover test
    lora_ab decode 150; lora_floor auto flat sorted
    timeout 80 python3 -m kernel_oracle.benchmarks.bench_lora --shapes prefill-8x2048 2>&1 | \
      grep "prefill-8x2048 | [qv] | fused" | cut -c1-120
    lora_tests 240
    timeout 150 python3 -m pytest oracle_tests/test_variant_warmup.py -q -x -p no:cacheprovider \
      >"$OUT/warmup_test.log" 2>&1; echo "variant warm-up test exit $?"; tail -2 "$OUT/warmup_test.log" | cut -c1-300
    ;;
  s12e)  # the final code (run setup first): the whole suite
    bash "$0" suite 420
    ;;
  s12f)  # the final code (run setup first): LoRA floor + prefill rows, the vision host cost, the main job
    lora_floor auto
    timeout 80 python3 -m kernel_oracle.benchmarks.bench_lora --shapes prefill-8x2048 2>&1 | \
      grep "prefill-8x2048 | [qv] | fused" | cut -c1-120
    timeout 90 python3 -m kernel_oracle.benchmarks.bench_vision --host --json "$OUT/vision_host.json" \
      >"$OUT/vision_host.log" 2>&1; echo "vision host exit $?"; grep "^| " "$OUT/vision_host.log" | cut -c1-200
    main_job
    ;;
  s12g)  # the vision warm call's host cost at the previous vision code (old/: git archive fd35994) and this one,
         # interleaved twice on one host
    for round in 1 2; do
      for tree in old .; do
        (cd "$tree" && python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 && \
         timeout 60 python3 -m kernel_oracle.benchmarks.bench_vision --host 2>&1 | grep "^| warm call" | \
           cut -c1-110 | sed "s|^|$tree round $round: |")
      done
    done
    ;;
  s12h)  # LoRA decode A/B 13 (per-slot grid variants), for the next session
    lora_ab decode 150
    ;;
  s12a)  # Nsight Compute source view (SASS lines with stall samples) of one warm decode-bs64 launch per side
    for side in q v; do
      timeout 150 ncu --target-processes all -k regex:fused_kernel --launch-skip 12 --launch-count 1 --set full \
        --import-source no -f -o /tmp/ncu_$side python3 -m kernel_oracle.benchmarks.diag_lora_decode --side $side \
        >"$OUT/ncu_$side.log" 2>&1; echo "ncu $side exit $?"; grep "fused us\|variant\|regs" "$OUT/ncu_$side.log" | head -5
      ncu -i /tmp/ncu_$side.ncu-rep --page source --csv --print-source sass >"$OUT/sass_$side.csv" 2>&1
      ncu -i /tmp/ncu_$side.ncu-rep --page details --section WarpStateStats --section InstructionStats \
        --section SourceCounters >"$OUT/details_$side.txt" 2>&1
      python3 scripts/sass_hotspots.py "$OUT/sass_$side.csv" | head -70
    done
    gzip -f "$OUT"/sass_*.csv
    ;;
  s11d)  # one GPU: the chosen blocks (heads first; q prefill 64-row tiles): prefill A/B 4, decode A/B 9; Nsight
         # Compute on one warm decode-bs64 launch per side; the LoRA kernel tests
    lora_ab prefill 120; lora_ab decode 120
    for side in q v; do
      timeout 120 ncu --target-processes all -k regex:fused_kernel --launch-skip 12 --launch-count 1 \
        --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
        --section SchedulerStats --section MemoryWorkloadAnalysis \
        python3 -m kernel_oracle.benchmarks.diag_lora_decode --side $side >"$OUT/ncu_$side.log" 2>&1
      echo "ncu $side exit $?"; grep -v "^==PROF==\|^ *-\+ *$\|^ *$" "$OUT/ncu_$side.log" | cut -c1-130 | head -90
    done
    lora_tests 150
    ;;
  s11e)  # one GPU: LoRA decode A/B 10 (small programs for bs64), prefill A/B 4 (the chosen blocks), decode floor
    lora_ab decode 200; lora_ab prefill 100; lora_floor auto flat
    ;;
  s11f)  # one GPU: LoRA prefill A/B 5 (around the chosen q blocks) twice; decode floor (flat at 1.5x)
    lora_ab prefill 100 1; lora_ab prefill 100 2; lora_floor auto
    ;;
  s11g)  # one GPU, the final code (run setup first): the whole suite, then the LoRA table (decode and prefill)
    bash "$0" suite 340
    timeout 150 python3 -m kernel_oracle.benchmarks.bench_lora --shapes decode-bs64 decode-bs256 prefill-8x2048 \
      --json "$OUT/bench_lora.json" >"$OUT/bench_lora.log" 2>&1; echo "bench_lora exit $?"
    grep "fused\|copy\|roofline" "$OUT/bench_lora.log" | cut -c1-150 | head -24
    ;;
  s11h)  # one GPU, the final code (run setup first): the variant warm-up test; the README's main job (120 s) and
         # its cases per campaign; LoRA prefill A/B 6 and the decode floor; the vision entry point's host cost
    timeout 100 python3 -m pytest oracle_tests/test_variant_warmup.py -q -p no:cacheprovider \
      >"$OUT/warmup_test.log" 2>&1; echo "variant warm-up test exit $?"; tail -1 "$OUT/warmup_test.log" | cut -c1-200
    main_job; lora_ab prefill 80; lora_floor auto
    timeout 90 python3 -m kernel_oracle.benchmarks.bench_vision --host --json "$OUT/vision_host.json" \
      >"$OUT/vision_host.log" 2>&1; echo "vision host exit $?"; grep "^| " "$OUT/vision_host.log" | cut -c1-200
    ;;
  s11i)  # one GPU: the README's main job twice on one machine: cold Triton cache, then the cache it left
    main_job; main_job
    ;;
  s10a)  # one GPU: the split-PV reduction; where a direct launch's host time goes
    bash "$0" repro-split-pv
    timeout 120 python3 -m kernel_oracle.benchmarks.launch_overhead 2>&1 | tee "$OUT/launch_overhead.log" | cut -c1-300
    ;;
  s10b)  # one GPU: vision host cost (the repeat shortcut), launch overhead, the split-PV reduction (ragged),
         # the repeat / cache / direct-launch tests
    timeout 200 python3 -m kernel_oracle.benchmarks.bench_vision --host --json "$OUT/vision_host.json" \
      >"$OUT/vision_host.log" 2>&1; echo "vision host exit $?"; tail -14 "$OUT/vision_host.log" | cut -c1-300
    timeout 120 python3 -m kernel_oracle.benchmarks.launch_overhead >"$OUT/launch_overhead.log" 2>&1
    echo "launch overhead exit $?"; tail -10 "$OUT/launch_overhead.log" | cut -c1-300
    timeout 200 python3 -m pytest oracle_tests/test_repeated_call.py oracle_tests/test_direct_launch.py \
      oracle_tests/test_kernels_vision.py -q -p no:cacheprovider -n 8 -k "cache or direct or last or repeat or \
      remember or layer or differ or edit or ambient or scale or unaligned or graph" >"$OUT/repeat_tests.log" 2>&1
    echo "repeat tests exit $?"; tail -3 "$OUT/repeat_tests.log" | cut -c1-300
    timeout 200 python3 -m kernel_oracle.benchmarks.repro_split_pv >"$OUT/repro_split_pv.log" 2>&1
    echo "repro exit $?"; grep -v "e-0[4-9]$" "$OUT/repro_split_pv.log" | cut -c1-200
    ;;
  s10c)  # one GPU: LoRA flat grid (floor, A/B, kernel tests); the split-PV reduction with IR dumps; vision host
         # cost; the repeat / cache / direct-launch tests
    timeout 120 python3 -m kernel_oracle.benchmarks.bench_lora --decode-floor --routes flat sorted \
      --json "$OUT/decode_floor.json" >"$OUT/decode_floor.log" 2>&1; echo "decode floor exit $?"
    grep -i "floor\|flat\|sorted" "$OUT/decode_floor.log" | tail -12 | cut -c1-250
    timeout 240 python3 -m kernel_oracle.benchmarks.bench_lora --decode-ab --json "$OUT/decode_ab.json" \
      >"$OUT/decode_ab.log" 2>&1; echo "decode ab exit $?"; grep "decode ab" "$OUT/decode_ab.log" | cut -c1-260
    timeout 240 python3 -m pytest oracle_tests/test_kernels_lora.py -q -x -n 12 -p no:cacheprovider \
      -k "routes or prefetch or realistic or graph or matches_oracle or flat or malformed" >"$OUT/lora_tests.log" 2>&1
    echo "lora kernel tests exit $?"; tail -2 "$OUT/lora_tests.log" | cut -c1-300
    timeout 200 python3 -m kernel_oracle.benchmarks.repro_split_pv --dump "$OUT/split_ir" >"$OUT/repro_split_pv.log" 2>&1
    echo "repro exit $?"; cat "$OUT/repro_split_pv.log" | cut -c1-220
    timeout 200 python3 -m kernel_oracle.benchmarks.bench_vision --host --json "$OUT/vision_host.json" \
      >"$OUT/vision_host.log" 2>&1; echo "vision host exit $?"; tail -12 "$OUT/vision_host.log" | cut -c1-300
    timeout 200 python3 -m pytest oracle_tests/test_repeated_call.py oracle_tests/test_direct_launch.py \
      oracle_tests/test_kernels_vision.py -q -p no:cacheprovider -n 8 -k "cache or direct or last or repeat or \
      remember or layer or differ or edit or ambient or scale or unaligned or graph" >"$OUT/repeat_tests.log" 2>&1
    echo "repeat tests exit $?"; tail -3 "$OUT/repeat_tests.log" | cut -c1-300
    ;;
  s10d)  # one GPU: LoRA decode A/B (flat blocks, auto); the split-PV reduction with one loop; our split kernel
         # (one masked loop): correctness (diag) and speed (the d80 / d72 shapes, split off and on)
    timeout 300 python3 -m kernel_oracle.benchmarks.bench_lora --decode-ab --json "$OUT/decode_ab.json" \
      >"$OUT/decode_ab.log" 2>&1; echo "decode ab exit $?"; grep "decode ab" "$OUT/decode_ab.log" | \
      sed -e "s/'BLOCK_K': 128, //; s/'C_SPLIT': None, //; s/'PREFETCH': True//; s/'check': 'ok', //" | cut -c1-200
    timeout 200 python3 -m kernel_oracle.benchmarks.repro_split_pv >"$OUT/repro_split_pv.log" 2>&1
    echo "repro exit $?"; grep -v "max error [0-9.]*e-0[45]$\|max error 0.000" "$OUT/repro_split_pv.log" | cut -c1-200
    timeout 150 python3 -m kernel_oracle.benchmarks.diag_vision --only \
      split80_default,split72_default,split_pv_only_64_80,split_qk_only_80_64,split80_bm64,split80_b32 2>&1 | \
      tee "$OUT/diag.log" | cut -c1-300
    for split in 0 1; do
      KERNEL_ORACLE_VISION_SPLIT_HEAD_DIM=$split timeout 200 python3 -m kernel_oracle.benchmarks.bench_vision \
        --shapes "8 ragged images,4x4096" --json "$OUT/vision_split$split.json" >"$OUT/vision_split$split.log" 2>&1
      echo "vision split=$split exit $?"; tail -6 "$OUT/vision_split$split.log" | cut -c1-300
    done
    ;;
  s10e)  # one GPU: vision folded scale A/B (4 shapes), vision kernel tests (slow too), LoRA decode A/B (wide
         # tiles), LoRA floor, LoRA kernel tests
    for fold in 0 1; do
      KERNEL_ORACLE_VISION_FOLD_SCALE=$fold timeout 250 python3 -m kernel_oracle.benchmarks.bench_vision \
        --json "$OUT/vision_fold$fold.json" >"$OUT/vision_fold$fold.log" 2>&1
      echo "vision fold=$fold exit $?"; grep "^| [0-9]" "$OUT/vision_fold$fold.log" | cut -d'|' -f2,4,5,6,7,8 | cut -c1-200
    done
    timeout 240 python3 -m pytest oracle_tests/test_kernels_vision.py oracle_tests/test_repeated_call.py \
      oracle_tests/test_direct_launch.py -q -p no:cacheprovider -n 8 --run-slow >"$OUT/vision_tests.log" 2>&1
    echo "vision tests exit $?"; tail -2 "$OUT/vision_tests.log" | cut -c1-300
    timeout 300 python3 -m kernel_oracle.benchmarks.bench_lora --decode-ab --json "$OUT/decode_ab.json" \
      >"$OUT/decode_ab.log" 2>&1; echo "decode ab exit $?"; grep "decode ab" "$OUT/decode_ab.log" | \
      sed -e "s/'BLOCK_K': 128, //; s/'C_SPLIT': None, //; s/'PREFETCH': True//; s/'check': 'ok', //" | cut -c1-200
    timeout 120 python3 -m kernel_oracle.benchmarks.bench_lora --decode-floor --routes auto sorted \
      --json "$OUT/decode_floor.json" >"$OUT/decode_floor.log" 2>&1; echo "decode floor exit $?"
    grep "^| decode" "$OUT/decode_floor.log" | cut -c1-200
    timeout 240 python3 -m pytest oracle_tests/test_kernels_lora.py -q -x -n 12 -p no:cacheprovider \
      >"$OUT/lora_tests.log" 2>&1; echo "lora kernel tests exit $?"; tail -2 "$OUT/lora_tests.log" | cut -c1-300
    ;;
  s10f)  # one GPU, the final code (after setup): the vision table beside cuDNN (4 shapes), vision host cost, the
         # LoRA table (decode and prefill)
    timeout 200 python3 -m kernel_oracle.benchmarks.bench_vision --json "$OUT/vision_table.json" \
      >"$OUT/vision_table.log" 2>&1; echo "vision table exit $?"; grep "^| [0-9]" "$OUT/vision_table.log" | cut -c1-330
    timeout 100 python3 -m kernel_oracle.benchmarks.bench_vision --host --json "$OUT/vision_host.json" \
      >"$OUT/vision_host.log" 2>&1; echo "vision host exit $?"; grep "^| " "$OUT/vision_host.log" | cut -c1-200
    timeout 150 python3 -m kernel_oracle.benchmarks.bench_lora --shapes decode-bs64 decode-bs256 prefill-8x2048 \
      --json "$OUT/bench_lora.json" >"$OUT/bench_lora.log" 2>&1; echo "bench_lora exit $?"
    grep "fused\|copy\|roofline" "$OUT/bench_lora.log" | cut -c1-200 | head -30
    ;;
  s10g)  # one GPU, the final code: LoRA prefill and decode rows, the whole suite, then the README's main job
         # (120 s) and its cases per campaign
    timeout 60 python3 -m kernel_oracle.benchmarks.bench_lora --shapes prefill-8x2048 2>&1 | grep "fused" | cut -c1-150
    timeout 60 python3 -m kernel_oracle.benchmarks.bench_lora --decode-floor --routes auto --json "$OUT/decode_floor.json" \
      >"$OUT/decode_floor.log" 2>&1; echo "decode floor exit $?"; grep "^| decode" "$OUT/decode_floor.log" | cut -c1-120
    bash "$0" suite 330
    main_job
    ;;
  s10h)  # one GPU: prefill-8x2048 LoRA table rows at session 9's code and at this code, interleaved; old/ is
         # session 9's tree in the snapshot: mkdir .gpu-snap/old && git archive 8e7f945 | tar -x -C .gpu-snap/old
    for round in 1 2; do
      for tree in old .; do
        (cd "$tree" && python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 && \
         timeout 100 python3 -m kernel_oracle.benchmarks.bench_lora --shapes prefill-8x2048 2>&1 | \
         grep "prefill-8x2048 | [qv] | fused" | sed "s|^|$tree round $round: |")
      done
    done
    python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
    ;;
  s10i)  # prefill q fused: the compiled kernel (registers) and its time, session 9's tree (old/) and this one
    for tree in old .; do
      (cd "$tree" && python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 && \
       cp -n ../benchmarks/diag_lora_prefill.py benchmarks/ 2>/dev/null; \
       timeout 100 python3 -m kernel_oracle.benchmarks.diag_lora_prefill "$( [ "$tree" = old ] && echo old || echo new )" \
         2>&1 | tail -5 | sed "s|^|$tree: |")
    done
    python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
    ;;
  repro-split-pv)  # one GPU: the two-accumulator PV reduction of Note [Head-dim split] (benchmarks/repro_split_pv.py)
    timeout 200 python3 -m kernel_oracle.benchmarks.repro_split_pv 2>&1 | tee "$OUT/repro_split_pv.log"
    ;;
  sweep-table)  # the vision sweep's JSON as lines: default config, warm call and cuDNN TFLOP/s, then each config
    python3 - "$2" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["records"]:
    print(r["shape"], "default", r["config"], "warm", round(r.get("triton_call_warm_tflops", 0)),
          "planned", round(r.get("triton_launch_tflops", 0)), "cudnn", round(r.get("cudnn_engine_tflops", 0)))
    for s in r.get("sweep", []):
        print("  ", s["config"], round(s["tflops"]) if "tflops" in s else s["error"][:150])
PY
    ;;
  s7c)  # two GPUs, cores split: a finding triaged and a soak (GPU 0, cores 0-11); the suite, then the bench (GPU 1)
    pin() { local cores=$1; shift; if command -v taskset >/dev/null; then taskset -c "$cores" "$@"; else "$@"; fi; }
    CUDA_VISIBLE_DEVICES=0 timeout 120 python3 -m \
      kernel_oracle.benchmarks.triage_lora_finding "${4:-docs/benchmarks/data/h200_2026-11-30_s7/soak1_triton_lora_findings.jsonl}" --top 4 2>&1 | tail -8 | cut -c1-300
    CUDA_VISIBLE_DEVICES=0 pin 0-11 bash "$0" soak-detached "${2:-600}"
    export CUDA_VISIBLE_DEVICES=1
    pin 12-31 bash "$0" suite "${3:-400}"
    TRITON_CACHE_DIR=/tmp/triton-s7 pin 12-31 timeout 330 python3 -m kernel_oracle.cli bench --device cuda \
      --targets triton,reference --seconds 15 --main-budget 0 --out "$OUT/oracle_bench_cold.json" \
      >"$OUT/bench_cold.log" 2>&1; echo "bench (cold cache) exit $?"; tail -5 "$OUT/bench_cold.log" | cut -c1-300
    ;;
  s7d)  # two GPUs: the soak's end (GPU 0); the main job on the bench's warm cache (GPU 1, cores 12-31)
    (export CUDA_VISIBLE_DEVICES=1 TRITON_CACHE_DIR=/tmp/triton-s7
     taskset -c 12-31 bash "$0" main-job-only >"$OUT/main_job_summary.log" 2>&1) &
    bash "$0" soak-wait 100
    cp /tmp/soak/triton-lora/summary.json "$OUT/soak_summary.json" 2>/dev/null
    cp /tmp/soak/triton-lora/findings.jsonl "$OUT/soak_findings.jsonl" 2>/dev/null
    wait; cat "$OUT/main_job_summary.log"
    ;;
  main-job-only)
    main_job; cp /tmp/main-job/latest.json "$OUT/main_job.json" 2>/dev/null
    ;;
  s7b)  # two GPUs: the oracle bench cold then warm on GPU 1; on GPU 0 the soak's end, a warmed cache, the main job
    (export CUDA_VISIBLE_DEVICES=1
     for pass in cold warm; do
       TRITON_CACHE_DIR=/tmp/triton-s7 timeout 300 python3 -m kernel_oracle.cli bench --device cuda \
         --targets triton,reference --seconds 20 --main-budget 0 --out "$OUT/oracle_bench_$pass.json" \
         >"$OUT/bench_$pass.log" 2>&1; echo "bench $pass exit $?" >>"$OUT/bench_$pass.log"
     done) &
    export CUDA_VISIBLE_DEVICES=0
    bash "$0" soak-wait 60
    timeout 150 python3 -m kernel_oracle.cli fuzz --target triton --op lora --device cuda --time 2 --warm-up 140 \
      --no-progress --out /tmp/warm >/dev/null 2>&1; echo "cache warmed: exit $?"
    main_job; cp /tmp/main-job/latest.json "$OUT/main_job.json" 2>/dev/null
    wait; for pass in cold warm; do tail -7 "$OUT/bench_$pass.log" | cut -c1-400; done
    ;;
  s6c)  # triage a saved LoRA finding on the GPU; warm the cache; the main job; LoRA kernel speed
    timeout 120 python3 -m kernel_oracle.benchmarks.triage_lora_finding gpu-in/findings.jsonl --top 8 2>&1 | tail -10 | cut -c1-400
    timeout 150 python3 -m kernel_oracle.cli fuzz --target triton --op lora --device cuda --time 2 --warm-up 140 \
      --no-progress --out /tmp/warm >/dev/null 2>&1; echo "cache warmed: exit $?"
    main_job
    timeout 120 python3 -m kernel_oracle.benchmarks.bench_lora --shapes decode-bs64 decode-bs256 prefill-8x2048 \
      --json "$OUT/bench_lora.json" >"$OUT/bench_lora.log" 2>&1; echo "bench_lora exit $?"; tail -30 "$OUT/bench_lora.log" | cut -c1-200
    ;;
  s6b)  # the soak's end, then the whole suite alone
    bash "$0" soak-wait 150
    TRITON_CACHE_DIR=/tmp/triton-s6 timeout "${2:-330}" python3 -m pytest oracle_tests -p no:cacheprovider --durations=25 -rfEs \
      >"$OUT/suite.log" 2>&1
    echo "suite rc=$?"; grep -E "passed|failed" "$OUT/suite.log" | tail -1; grep -E "^(FAILED|ERROR)" "$OUT/suite.log" | head -20
    ;;
  scale)
    python3 -m pip install -q --no-index --find-links .whl/cluster dask distributed >/dev/null 2>&1 || exit 2
    for n in 1 2; do
      ko fuzz --target triton --op vision --device cuda --limits tiny --time "${2:-20}" --seeds 4 --gpus $n \
        --no-progress --out /tmp/gpus$n 2>&1 | tail -2
    done
    ;;
  s14a)  # LoRA decode A/B 14, then the launch + route floor of the chosen blocks
    lora_ab decode 300
    lora_floor auto
    ;;
  s14d)  # LoRA decode A/B 14 with programmatic dependent launch; its GPU tests
    lora_ab decode 300
    timeout 200 python3 -m pytest oracle_tests/test_kernels_lora.py -q -p no:cacheprovider -k "pdl or metadata_first" \
      -rs >"$OUT/pdl_tests.log" 2>&1; echo "pdl tests exit $?"; tail -4 "$OUT/pdl_tests.log" | cut -c1-300
    ;;
  s14e)  # LoRA decode A/B 16 (register cap, stages)
    lora_ab decode 120
    ;;
  s14f)  # LoRA decode A/B 17 (TILES_LAST: the per-slot grid's programs with rows first; slower, removed)
    lora_ab decode 120
    ;;
  s14g)  # the final code: LoRA decode floor, decode A/B 18, the LoRA kernel tests
    lora_floor auto
    lora_ab decode 90
    lora_tests 240
    ;;
  s14h)  # LoRA decode A/B 19 (heads per program: slower, the experiment removed)
    lora_ab decode 150
    ;;
  s14i)  # the final code: the PDL and META_FIRST tests, the largest shapes
    timeout 200 python3 -m pytest oracle_tests/test_kernels_lora.py -q -p no:cacheprovider -rs \
      -k "pdl or metadata_first or largest or graph_capturable" >"$OUT/final_tests.log" 2>&1
    echo "final tests exit $?"; tail -3 "$OUT/final_tests.log" | cut -c1-300
    ;;
  s14j)  # after review (the PDL capability cached): the PDL tests, the LoRA decode floor
    timeout 120 python3 -m pytest oracle_tests/test_kernels_lora.py -q -p no:cacheprovider -k "pdl or graph_capturable" \
      >"$OUT/review_tests.log" 2>&1; echo "pdl tests exit $?"; tail -1 "$OUT/review_tests.log"
    lora_floor auto
    ;;
  s14k)  # after review (LAUNCH_KEYS): the LoRA kernel tests
    lora_tests 200
    ;;
  s14b)  # the final code (run setup first): LoRA decode A/B 15, the whole suite
    lora_ab decode 90
    bash "$0" suite 470
    ;;
  s14c)  # the final code (run setup first): the largest-shape LoRA tests; LoRA floor + prefill rows, the vision
         # host cost and table, the main job
    timeout 120 python3 -m pytest oracle_tests/test_kernels_lora.py -q -p no:cacheprovider -k "largest or pdl" \
      >"$OUT/largest_tests.log" 2>&1; echo "largest + pdl tests exit $?"; tail -1 "$OUT/largest_tests.log"
    bash "$0" s12f
    timeout 150 python3 -m kernel_oracle.benchmarks.bench_vision --json "$OUT/bench_vision.json" \
      >"$OUT/bench_vision.log" 2>&1; echo "bench_vision exit $?"; grep "^| " "$OUT/bench_vision.log" | cut -c1-160 | tail -12
    ;;
  s15a)  # session 15 (run setup first): the pipelined key loop (since removed) and the 2-per-SM configs of the vision
         # kernel -- GPU correctness (bit for bit against the plain loop, the oracle), the sweep beside cuDNN, host cost
    echo "s15a ran at 5885c86 (scripts/h200_session.sh of that commit); the pipelined loop is gone"; exit 2
    ;;
  s15b)  # session 15 (run setup first): descriptor loads (TMA) in the vision kernel -- GPU correctness (bit for bit
         # against pointer loads, the oracle), then the sweep beside cuDNN
    timeout 200 python3 -m pytest oracle_tests/test_kernels_vision.py -q -p no:cacheprovider -k "descriptor_loads" \
      >"$OUT/tma_tests.log" 2>&1; echo "descriptor-load tests exit $?"; tail -1 "$OUT/tma_tests.log"
    grep -E "^(FAILED|E  )" "$OUT/tma_tests.log" | head -8
    timeout 300 python3 -m kernel_oracle.benchmarks.bench_vision --sweep --json "$OUT/bench_vision_sweep.json" \
      >"$OUT/bench_vision_sweep.log" 2>&1; echo "bench_vision --sweep exit $?"
    grep "^| " "$OUT/bench_vision_sweep.log" | cut -d'|' -f2,5,11 | tail -5; grep "^sweep" "$OUT/bench_vision_sweep.log"
    tail -3 "$OUT/bench_vision_sweep.log"
    ;;
  s15c)  # session 15 (run setup first): descriptor loads on by default (128 x 128 blocks above 64 head-dim columns) --
         # the vision GPU tests, the side-by-side table beside cuDNN, the host cost, the main job
    vision_gpu_tests "$OUT/vision_tests.log"
    timeout 150 python3 -m kernel_oracle.benchmarks.bench_vision --json "$OUT/bench_vision.json" \
      >"$OUT/bench_vision.log" 2>&1; echo "bench_vision exit $?"; grep "^| " "$OUT/bench_vision.log" | cut -c1-200 | tail -5
    timeout 90 python3 -m kernel_oracle.benchmarks.bench_vision --host --json "$OUT/vision_host.json" \
      >"$OUT/vision_host.log" 2>&1; echo "vision host exit $?"; grep "^| " "$OUT/vision_host.log" | cut -c1-120 | head -6
    main_job
    ;;
  s15d)  # session 15 (run setup first): descriptor loads with a split head dim -- GPU correctness (bit for bit
         # against pointer loads, the oracle), the sweep of the padded head dims split, the host cost twice
    timeout 200 python3 -m pytest oracle_tests/test_kernels_vision.py -q -p no:cacheprovider -k "descriptor_loads" \
      >"$OUT/tma_split_tests.log" 2>&1; echo "descriptor-load tests exit $?"; tail -1 "$OUT/tma_split_tests.log"
    grep -E "^(FAILED|E  )" "$OUT/tma_split_tests.log" | head -8
    KERNEL_ORACLE_VISION_SPLIT_HEAD_DIM=1 timeout 240 python3 -m kernel_oracle.benchmarks.bench_vision --sweep \
      --shapes "8 ragged images,4x4096" --json "$OUT/bench_vision_split_sweep.json" >"$OUT/bench_vision_split.log" 2>&1
    echo "bench_vision split --sweep exit $?"
    grep "^| " "$OUT/bench_vision_split.log" | cut -d'|' -f2,5,11 | tail -3; grep "^sweep" "$OUT/bench_vision_split.log"
    tail -2 "$OUT/bench_vision_split.log"
    for round in 1 2; do
      timeout 60 python3 -m kernel_oracle.benchmarks.bench_vision --host --json "$OUT/vision_host_$round.json" \
        >"$OUT/vision_host_$round.log" 2>&1; grep "^| warm call\|^| planned" "$OUT/vision_host_$round.log" | cut -c1-120
    done
    ;;
  s15e)  # session 15 (run setup first): the split head dim with descriptor loads on by default -- the vision GPU tests,
         # the side-by-side table beside cuDNN twice, the main job
    vision_gpu_tests "$OUT/vision_tests.log"
    for round in 1 2; do
      timeout 150 python3 -m kernel_oracle.benchmarks.bench_vision --json "$OUT/bench_vision_$round.json" \
        >"$OUT/bench_vision_$round.log" 2>&1; echo "bench_vision round $round exit $?"
      grep "^| " "$OUT/bench_vision_$round.log" | cut -d'|' -f2,5,7,11 | tail -4
    done
    main_job
    ;;
  s16a)  # session 16 (run setup first): s15e's data again (its raw files were lost with the machine), plus the
         # sm_90 compile test on this Triton (CI's Triton 3.9 refused a variant left without its TMA constexpr)
    timeout 120 python3 -m pytest oracle_tests/test_compiles_for_hopper.py -q -p no:cacheprovider \
      >"$OUT/compiles_for_hopper.log" 2>&1; echo "compile test exit $?"; tail -1 "$OUT/compiles_for_hopper.log"
    bash "$0" s15e
    ;;
  s16b)  # session 16 (run setup first): the split-head-dim tests now run on the GPU too; the vision host cost twice
    timeout 150 python3 -m pytest oracle_tests/test_kernels_vision.py -q -p no:cacheprovider -k "split or descriptor" \
      >"$OUT/split_tests.log" 2>&1; echo "split / descriptor tests exit $?"; tail -1 "$OUT/split_tests.log"
    grep -E "^(FAILED|ERROR)" "$OUT/split_tests.log" | head -8
    for round in 1 2; do
      timeout 60 python3 -m kernel_oracle.benchmarks.bench_vision --host --json "$OUT/vision_host_$round.json" \
        >"$OUT/vision_host_$round.log" 2>&1; grep "^| warm call\|^| planned" "$OUT/vision_host_$round.log" | cut -c1-120
    done
    ;;
  s17a)  # session 17 (run setup first): the key loop warp-specialized by triton 3.6's Hopper pass (4 warps asked,
         # queries through a descriptor too, one masked loop) -- GPU correctness, then the sweep beside cuDNN
    timeout 200 python3 -m pytest oracle_tests/test_kernels_vision.py -q -p no:cacheprovider \
      -k "warp_specialized or descriptor_loads" >"$OUT/ws_tests.log" 2>&1; echo "WS tests exit $?"
    tail -1 "$OUT/ws_tests.log"; grep -E "^(FAILED|E  )" "$OUT/ws_tests.log" | head -8
    timeout 330 python3 -m kernel_oracle.benchmarks.bench_vision --sweep --json "$OUT/bench_vision_sweep.json" \
      --configs 128,128,8,3,0,1 128,64,8,3,0,1 64,64,4,3 128,128,4,2,1,1 128,64,4,2,1,1 128,64,4,3,1,1 \
      128,128,4,3,1,1 64,64,4,2,1,1 64,128,4,2,1,1 \
      >"$OUT/bench_vision_sweep.log" 2>&1; echo "bench_vision --sweep exit $?"
    grep "^| " "$OUT/bench_vision_sweep.log" | cut -d'|' -f2,5,11 | tail -5; grep "^sweep" "$OUT/bench_vision_sweep.log"
    tail -3 "$OUT/bench_vision_sweep.log"
    ;;
  s17b)  # session 17: triton 3.6's Hopper warp specialization on a minimal attention (wrong output in s17a's tests)
    timeout 240 python3 -m kernel_oracle.benchmarks.repro_hopper_ws >"$OUT/repro_hopper_ws.log" 2>&1
    echo "repro_hopper_ws exit $?"; cat "$OUT/repro_hopper_ws.log" | tail -12
    ;;
  s17c)  # session 17 (run setup first): s17a with the output stored through a descriptor under warp specialization
    bash "$0" s17b
    timeout 200 python3 -m pytest oracle_tests/test_kernels_vision.py -q -p no:cacheprovider \
      -k "warp_specialized or descriptor_loads" >"$OUT/ws_tests.log" 2>&1; echo "WS tests exit $?"
    tail -1 "$OUT/ws_tests.log"; grep -E "^(FAILED|E  )" "$OUT/ws_tests.log" | head -8
    timeout 330 python3 -m kernel_oracle.benchmarks.bench_vision --sweep --json "$OUT/bench_vision_sweep.json" \
      --configs 128,128,8,3,0,1 128,64,8,3,0,1 64,64,4,3 128,128,4,2,1,1 128,64,4,2,1,1 128,64,4,3,1,1 \
      128,128,4,3,1,1 128,64,4,4,1,1 64,64,4,3,1,1 64,128,4,2,1,1 \
      >"$OUT/bench_vision_sweep.log" 2>&1; echo "bench_vision --sweep exit $?"
    grep "^| " "$OUT/bench_vision_sweep.log" | cut -d'|' -f2,5,11 | tail -5; grep "^sweep" "$OUT/bench_vision_sweep.log"
    ;;
  s17d)  # session 17 (run setup first): final code -- the minimal attention at 2-4 stages, the vision GPU tests, the
         # side-by-side table twice, d128 with and without warp specialization twice, the host cost
    bash "$0" s17b
    vision_gpu_tests "$OUT/vision_tests.log"
    for round in 1 2; do
      timeout 120 python3 -m kernel_oracle.benchmarks.bench_vision --json "$OUT/bench_vision_$round.json" \
        >"$OUT/bench_vision_$round.log" 2>&1; echo "bench_vision round $round exit $?"
      grep "^| " "$OUT/bench_vision_$round.log" | cut -d'|' -f2,5,7,11 | tail -4
      timeout 90 python3 -m kernel_oracle.benchmarks.bench_vision --shapes 2x16384 --sweep \
        --configs 128,128,8,3,0,1 128,128,4,2,1,1 --json "$OUT/bench_vision_d128_$round.json" \
        >"$OUT/bench_vision_d128_$round.log" 2>&1; grep "^sweep" "$OUT/bench_vision_d128_$round.log"
    done
    timeout 60 python3 -m kernel_oracle.benchmarks.bench_vision --host --json "$OUT/vision_host.json" \
      >"$OUT/vision_host.log" 2>&1; grep "^| warm call\|^| planned" "$OUT/vision_host.log" | cut -c1-120
    ;;
  s17f)  # session 17 (run setup first): the warp-specialized loop on whole key blocks as the d128 default -- its tests,
         # the vision GPU tests, the table and the d128 configs twice, the main job (at most 8 files come back)
    vision_gpu_tests "$OUT/s17f_vision_tests.log"
    grep -c "warp_specialized\|whole_blocks" "$OUT/s17f_vision_tests.log"
    for round in 1 2; do
      timeout 120 python3 -m kernel_oracle.benchmarks.bench_vision --json "$OUT/s17f_bench_vision_$round.json" \
        >/tmp/bv.log 2>&1; echo "bench_vision round $round exit $?"
      grep "^| " /tmp/bv.log | cut -d'|' -f2,5,7,11 | tail -4
      timeout 90 python3 -m kernel_oracle.benchmarks.bench_vision --shapes 2x16384 --sweep \
        --configs 128,128,8,3,0,1 128,128,4,2,1,1 128,128,4,2,1,1,0,1 --json "$OUT/s17f_bench_vision_d128_$round.json" \
        >/tmp/bvd.log 2>&1; grep "^sweep" /tmp/bvd.log
    done
    main_job; cp "$OUT/main_job.log" "$OUT/s17f_main_job.log" 2>/dev/null; rm -f "$OUT/main_job.log"
    ;;
  s17g)  # session 17 (run setup first): final code -- our kernel with the warp-specialized config, 4 rounds per dtype
         # and mask mode (s17f's realistic fp16 test came out 5.6% NaN), then the vision GPU tests
    timeout 150 python3 -m kernel_oracle.benchmarks.repro_hopper_ws --ours >"$OUT/s17g_ours_ws.log" 2>&1
    echo "repro_hopper_ws --ours exit $?"; tail -18 "$OUT/s17g_ours_ws.log"
    vision_gpu_tests "$OUT/s17g_vision_tests.log"
    ;;
  s18a)  # session 18 (run setup first): LoRA decode A/B 21 -- the slot's metadata and route (1), and also the
         # first weight blocks (2), before the grid-dependency wait; then s17f's NaN hunted: our WS config compiled
         # afresh in 32 processes, 8 sharing the GPU at a time
    lora_ab decode 240 _s18a
    timeout 330 python3 -m kernel_oracle.benchmarks.repro_hopper_ws --hunt 8 4 >"$OUT/s18a_ws_hunt.log" 2>&1
    echo "ws hunt exit $?"; tail -12 "$OUT/s18a_ws_hunt.log"
    ;;
  s18b)  # session 18 (run setup first): LoRA decode A/B 22 (blocks under PRE_WAIT 2); the WS NaN: the minimal kernel
         # in 8 processes at a time; ours alone while 7 processes only multiply matrices; ours alone, no neighbour
    lora_ab decode 240 _s18b
    for mode in "8 2 --toy" "8 6 --noise" "1 6"; do
      timeout 200 python3 -m kernel_oracle.benchmarks.repro_hopper_ws --hunt $mode >/tmp/hunt.log 2>&1
      echo "ws hunt $mode: exit $?"; tail -4 /tmp/hunt.log; cat /tmp/hunt.log >>"$OUT/s18b_ws_hunt.log"
    done
    ;;
  s18c)  # session 18 (run setup first): LoRA decode A/B 23 (tiles and the flat grid under PRE_WAIT); the minimal
         # warp-specialized kernel checked while 7 processes only multiply matrices
    lora_ab decode 200 _s18c
    timeout 150 python3 -m kernel_oracle.benchmarks.repro_hopper_ws --hunt 8 6 --toy --noise >"$OUT/s18c_ws_hunt.log" 2>&1
    echo "ws hunt toy --noise: exit $?"; tail -4 "$OUT/s18c_ws_hunt.log"
    ;;
  s18d)  # session 18 (run setup first), final code: the LoRA kernel tests (early reads among them), the decode floor
         # without and with early reads, decode A/B 24; the vision WS tests (the config withdrawn, its override)
    lora_tests 260; grep -E "^(FAILED|ERROR)" "$OUT/lora_tests.log" | head -5
    lora_floor auto; mv "$OUT/decode_floor.json" "$OUT/s18d_decode_floor.json"
    timeout 80 python3 -m kernel_oracle.benchmarks.bench_lora --decode-floor --routes auto --early-reads \
      --json "$OUT/s18d_decode_floor_early.json" >/tmp/dfe.log 2>&1; echo "decode floor early exit $?"
    grep "^| decode" /tmp/dfe.log | cut -c1-100
    lora_ab decode 150 _s18d
    timeout 120 python3 -m pytest oracle_tests/test_kernels_vision.py -q -p no:cacheprovider \
      -k "warp_specialized or whole_blocks" 2>&1 | tail -2
    ;;
  s18e)  # session 18 (run setup first), final code: the main job, the vision GPU tests, then our LoRA kernels fuzzed
         # for 60 s under early reads (Note [Early reads]: every case builds its metadata just before the call)
    main_job; cp "$OUT/main_job.log" "$OUT/s18e_main_job.log" 2>/dev/null; rm -f "$OUT/main_job.log"
    vision_gpu_tests "$OUT/s18e_vision_tests.log"
    mkdir -p $SOAK
    KERNEL_ORACLE_LORA_EARLY_READS=1 timeout 150 python3 -m kernel_oracle.cli fuzz --target triton --op lora \
      --device cuda --time 60 --seed 18 --no-progress --out "$SOAK/early-lora" >"$SOAK/early-lora.log" 2>&1
    echo "early-reads fuzz exit $?"; cp "$SOAK/early-lora.log" "$OUT/s18e_early_fuzz.log"
    bash "$0" soak-wait 2 | grep -v "^tar\|soak.tgz"
    ;;
  s18f)  # session 18, after the review mends (PDL_EARLY_OPTIONS built once; the two s17 toy scripts folded into one)
    timeout 100 python3 -m pytest oracle_tests/test_kernels_lora.py -q -n 8 -p no:cacheprovider -k "pdl or early" 2>&1 | tail -1
    timeout 60 python3 docs/benchmarks/data/h200_2026-12-02_s17/s17_toy_ws.py mask-cost 2>&1 | tail -8
    ;;
  *) sed -n 2,12p "$0"; exit 2 ;;
esac
