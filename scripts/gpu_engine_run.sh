#!/usr/bin/env bash
# The native engine's GPU checks that no kdtree command runs yet, in one bounded, logged run:
# the engine's pytest suites at full size on the GPU (parity, decode, soak, INT4, split,
# multi-GPU), compute-sanitizer memcheck of the engine's smoke run, a metrics capture, and the
# measuring builds (phase clocks, the W4A16 per-CTA timeline, Nsight Compute). The other steps
# call the kdtree command that does the work (kdtree build, test --native [--large|--sanitize],
# engine-check, demo, bench engine|load|moe|kernels|all|gpus|collectives), so that one run
# collects everything under $OUT; run those commands directly when one is all you need.
# Usage (repository root, on the GPU machine):
#   OUT=/tmp/o scripts/gpu_engine_run.sh [steps...]     steps default to all, in order:
#   build native sankernels smoke parity decode soak bench bench16 sanitize load capture demo w4a16 moe
# and, named only: moetl (the W4A16 kernel's per-CTA timeline at n = 1 and 8: a -DKD_W4_TIMELINE
# build of bench_moe; scripts/w4_timeline_ranks.py reads it), topk (the top-K scans' GPU test),
# topkrace (its racecheck), large (native tests on fresh large cases), clk (phase clocks of
# attention, top-K, tree build: scripts/clk_cases.txt), ncu (source-level Nsight Compute:
# scripts/ncu_cases.txt), split (the simulated split on one GPU), multigpu (kdtree run --gpus 2
# tests), kernels (kdtree bench kernels), benchall (kdtree bench all; KDTREE_BENCH_BUDGET_S),
# int4 (the INT4 DDTree == AR tests), gpus (1 vs KDTREE_GPUS=2 GPUs over NCCL), collectives
# (NCCL's cost per call at the engine's sizes), profile (per-kernel GPU times of a decode run).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KDTREE_NATIVE_VARIANT=gpu KDTREE_NATIVE_RESULTS="$OUT/native-results.jsonl"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
STEPS=("$@"); [ ${#STEPS[@]} -eq 0 ] && STEPS=(build native sankernels smoke parity decode soak bench bench16 sanitize load capture demo w4a16 moe)
declare -a rows=()
step() {  # name, timeout seconds, command...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s.%N)
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$? t1=$(date +%s.%N)
  local secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')
  local last=$(grep -v '^\s*$' "$OUT/$name.log" | tail -1 | cut -c1-90)
  rows+=("$(printf '%-10s %-6s %7s s  %s' "$name" "$([ $rc -eq 0 ] && echo ok || echo rc=$rc)" "$secs" "$last")")
  [ $rc -ne 0 ] && tail -25 "$OUT/$name.log"
  return 0
}
{ date -u +%FT%TZ; echo "commit ${KDTREE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader;
  nvcc --version | tail -1; "$PY" -c 'import torch; print("torch", torch.__version__)'; } >"$OUT/env.txt" 2>&1
for s in "${STEPS[@]}"; do
  case $s in
    build) step build 300 "$PY" -m kdtree_cli build -j 16 ;;
    smoke) step smoke 120 "$PY" -m python_engine.demo.engine_check --requests 4 --tokens 32 ;;
    parity) step parity 300 "$PY" -m pytest -q -x -s -p no:cacheprovider tests/native/test_native_forward.py ;;
    decode) step decode 400 "$PY" -m pytest -q -s -p no:cacheprovider tests/native/test_native_decode.py ;;
    soak) step soak 300 "$PY" -m pytest -q -s -p no:cacheprovider tests/native/test_native_soak.py ;;
    sankernels) step sankernels 240 "$PY" -m kdtree_cli test --native --sanitize memcheck,racecheck ;;
    capture) printf 'def fibonacci(n):\n{"prompt": "import os\\nimport sys\\n"}\nclass Stack:\n    def push(self, item):\n{"prompt": "for i in range(10):\\n"}\n' > /tmp/prompts.txt
           step capture 120 "$PY" -m kdtree_cli run --engine native --model refs/models/demo-target \
           --drafter refs/models/demo-drafter --prompts /tmp/prompts.txt --max-tokens 400 --budget 32 --metrics "$OUT/native-run.jsonl" ;;
    demo) step demo 180 "$PY" -m kdtree_cli demo ;;
    w4a16) step w4a16 240 bash -c "build/release/bin/test_moe_w4a16 && KDTREE_SANITIZE_QUICK=1 compute-sanitizer --tool racecheck --error-exitcode 9 build/release/bin/test_moe_w4a16 | tail -3" ;;
    kernels) step kernels 480 "$PY" -m kdtree_cli bench kernels --out "$OUT/kbench"
           cp "$OUT/kbench/bench.md" "$OUT/kernels.md" 2>/dev/null; cp "$OUT/kbench/bench.json" "$OUT/kernels.json" 2>/dev/null ;;
    benchall) step benchall 400 "$PY" -m kdtree_cli bench all --out "$OUT/all" --budget-s "${KDTREE_BENCH_BUDGET_S:-300}"
           for f in summary.md bench.md bench.json; do cp "$OUT/all/$f" "$OUT/all-$f" 2>/dev/null; done ;;
    large) step large 300 "$PY" -m kdtree_cli test --native --large ;;
    clk) # one measuring build with every kernel's phase clocks (they print only for their own kernel)
           step clk-build 300 env NVCC_APPEND_FLAGS="-DKD_ATTN_PHASE_CLOCKS -DKD_TOPK_PHASE_CLOCKS -DKD_TREE_PHASE_CLOCKS" \
             "$PY" -m kdtree_cli build --build-dir build-clk -j 16 bench_kernels
           while read -r -u 3 c; do [ -z "$c" ] && continue; echo "$c" > /tmp/clk_case.txt
             step "clk-$(echo "$c" | tr -c 'a-zA-Z0-9\n' _ | cut -c1-60)" 120 build-clk/release/bin/bench_kernels --cases /tmp/clk_case.txt
           done 3< "${KDTREE_CLK_CASES:-scripts/clk_cases.txt}" ;;
    ncu) # Nsight Compute, source level (SASS with stall samples) for the cases of scripts/ncu_cases.txt
           # (`name@kernel regex@launches@command`); the report's pages as text
           while IFS='@' read -r -u 3 name rx count cmd; do [ -z "$name" ] && continue
             step "ncu-$name" 200 ncu --clock-control none --set full --import-source yes -k "regex:$rx" --launch-count "$count" \
               -f -o "$OUT/ncu-$name" bash -c "$cmd"
             ncu -i "$OUT/ncu-$name.ncu-rep" --page details > "$OUT/ncu-$name-details.txt" 2>&1
             ncu -i "$OUT/ncu-$name.ncu-rep" --page source --print-source sass --csv > "$OUT/ncu-$name-sass.csv" 2>&1
           done 3< "${KDTREE_NCU_CASES:-scripts/ncu_cases.txt}" ;;
    moetl) # the W4A16 timeline (csrc/dev/moe_w4a16_timeline.h): a measuring build of bench_moe, n = 1 and 8
           step moetl-build 300 env NVCC_APPEND_FLAGS=-DKD_W4_TIMELINE "$PY" -m kdtree_cli build --build-dir build-tl -j 16 bench_moe
           step moetl-routing 60 "$PY" -c "from kdtree_cli.bench.moe import MoeShape, routing_tensors; \
from python_engine.kdtr import write_kdtr; write_kdtr('$OUT/moetl-routing.kdtr', routing_tensors(MoeShape(), (1, 8), 4, 0))"
           step moetl 300 bash -c "build-tl/release/bin/bench_moe --routing '$OUT/moetl-routing.kdtr' --reps 20 > '$OUT/moetl.jsonl'" ;;
    topk) # topk_logprobs' scans on the GPU (every variant, the random styles and a 448 x 163840 case), racecheck
           step topk 300 build/release/bin/test_tree_build topk_random ;;
    topkrace) step topkrace 150 env KDTREE_SANITIZE_QUICK=1 compute-sanitizer --tool racecheck --error-exitcode 9 \
             build/release/bin/test_tree_build topk_random ;;
    int4) step int4 300 "$PY" -m pytest -q -s -p no:cacheprovider tests/native/test_native_decode.py -k int4 ;;
    moe) step moe 300 "$PY" -m kdtree_cli bench moe --no-build --out-dir "$OUT" ;;
    bench|bench16) dt=float32; [ $s = bench16 ] && dt=bfloat16
           step $s 300 "$PY" -c "from pathlib import Path; from kdtree_cli.bench.engine import EngineBench, run_engine_bench; \
           import json; r = run_engine_bench(EngineBench(dtype='$dt', out_dir=Path('$OUT/$dt'))); \
           print(json.dumps({k: round(v) for k, v in r['tokens_per_s'].items()}), r['graph_share'])" ;;
    profile) step profile 240 ncu --profile-from-start off --metrics gpu__time_duration.sum --csv \
           --log-file "$OUT/ncu.csv" "$PY" -m kdtree_cli.bench.kernel_profile --dtype float32 --tokens 12
           "$PY" -m kdtree_cli.bench.kernel_profile --summarize "$OUT/ncu.csv" >"$OUT/profile.txt" 2>&1 ;;
    sanitize) step sanitize 300 compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
           "$PY" -m python_engine.demo.engine_check --requests 4 --tokens 32 ;;
    load) step load 400 "$PY" -c "from pathlib import Path; from kdtree_cli.bench.load import run_load_bench; import json; \
           r = run_load_bench(Path('/tmp/kimi-slice')); open('$OUT/load.json','w').write(json.dumps(r, indent=2)); \
           print('native', round(r['native_gb_per_s'],2), 'GB/s; torch', round(r['torch_gb_per_s'],2), 'GB/s; mem ratio', round(r['memory']['ratio'],3), 'left', r['memory']['left_behind'])" ;;
    native) step native 300 "$PY" -m kdtree_cli test --native ;;
    split) step split 300 "$PY" -m pytest -q -s -p no:cacheprovider tests/native/test_native_split.py ;;
    multigpu) step multigpu 300 "$PY" -m pytest -q -s -p no:cacheprovider tests/native/test_multi_gpu_run.py ;;
    collectives) step collectives 200 "$PY" -m kdtree_cli bench collectives --gpus "${KDTREE_GPUS:-2}" --out "$OUT" ;;
    gpus) step gpus 560 "$PY" -m kdtree_cli bench gpus --gpus "${KDTREE_GPUS:-2}" --out "$OUT/gpus" ;;
    *) echo "unknown step $s" ;;
  esac
done
# everything in one archive; beside it only the few files read first (the device tool returns 8)
cd "$OUT" && tar czf logs.tgz --exclude=logs.tgz --exclude='*.ncu-rep' ./* 2>/dev/null
find . -type f ! -name logs.tgz ! -name env.txt ! -name native-results.jsonl ! -name native-run.jsonl \
  ! -name load.json ! -name engine.json ! -name moe.json ! -name gpus.json ! -name gpus.md ! -name moe.md \
  ! -name kernels.md ! -name kernels.json ! -name all-summary.md ! -name all-bench.md ! -name all-bench.json ! -name collectives.json ! -name collectives.md -delete
printf '%s\n' "${rows[@]}"
