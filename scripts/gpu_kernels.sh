#!/usr/bin/env bash
# GPU run of the DDTree kernels, one call on an H200, under 9 minutes:
#   1. build the kernel tests and the bench (kdtree build, auto-detected target)
#   2. generate the large attention cases and a tree-build fuzz bundle from one logged seed
#   3. run the native tests (tree_build, tree_accept + the on-device chain, verify_attn)
#   4. time the kernels next to a cuBLAS bf16 GEMM (bench_kernels, JSON)
#   5. compute-sanitizer memcheck, initcheck and racecheck on the tests (small cases only)
# Logs and bench.json go to $OUT (or a temp folder); a short table is printed last.
#
#   scripts/gpu_kernels.sh                 # fresh seed
#   SEED=1234 scripts/gpu_kernels.sh       # repeat a run's random cases
#
# Needs python3 with numpy, torch (CUDA), typer, rich, ninja; nvcc and cuBLAS; compute-sanitizer.
# Exit status 0 when the build, every test and every sanitizer run passed.
set -uo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
LOGS=${OUT:-$(mktemp -d -t kdtree-gpu-kernels.XXXXXX)}
mkdir -p "$LOGS"
SEED=${SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
DATA=$(mktemp -d -t kdtree-kernel-cases.XXXXXX)  # large generated cases: never in $OUT
BUDGET_S=${BUDGET_S:-520}                          # stop starting new steps past this
START=$(date +%s)
BIN=build/release/bin
status=0
declare -a rows=()
# CUDA tools may live outside PATH (/usr/local/cuda/bin on the lent machines)
for d in "${CUDA_HOME:-}/bin" /usr/local/cuda/bin /opt/cuda/bin; do
  [ -d "$d" ] && case ":$PATH:" in *":$d:"*) ;; *) PATH="$PATH:$d" ;; esac
done
export PATH

row() { rows+=("$(printf '%-30s %-8s %s' "$1" "$2" "$3")"); }
elapsed() { echo $(( $(date +%s) - START )); }
left() { echo $(( BUDGET_S - $(elapsed) )); }
summary_line() { grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -1; }

{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(hostname)"
  echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo '(no git)') $(git status --porcelain 2>/dev/null | wc -l) files changed"
  echo "seed: $SEED  (SEED=$SEED scripts/gpu_kernels.sh repeats the random cases)"
  nvidia-smi --query-gpu=name,compute_cap,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1
  (command -v nvcc && nvcc --version | tail -2) 2>&1
  (command -v compute-sanitizer && compute-sanitizer --version | tail -1) 2>&1
  "$PY" -c 'import torch, numpy; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "numpy", numpy.__version__)' 2>&1
} | tee "$LOGS/env.txt"

# 1. build
t0=$(date +%s)
"$PY" -m kdtree_cli build test_tree_build test_tree_accept test_verify_attn bench_kernels --verbose \
  >"$LOGS/build.log" 2>&1
rc=$?
if [ $rc -eq 0 ]; then row build ok "$(( $(date +%s) - t0 )) s; $(grep -o 'targets [^;]*' "$LOGS/build.log" | tail -1)"
else row build FAILED "exit $rc: $LOGS/build.log"; status=1; tail -30 "$LOGS/build.log"; fi
# resource report of the kernels (registers, shared memory, spills) for the built target
for cu in tree_build tree_accept verify_attn_bf16 verify_attn_f32; do
  nvcc -std=c++17 -Icsrc -gencode arch=compute_90a,code=sm_90a -Xptxas -v -c "csrc/kernels/$cu.cu" -o /dev/null \
    >"$LOGS/resources_$cu.txt" 2>&1 &
done
wait

# 2. generated cases (fresh random inputs from $SEED)
t0=$(date +%s)
# LARGE_CASES="name ..." limits the attention cases (see CASES in large_attn_cases.py)
"$PY" -m python_engine.refgen.large_attn_cases "$DATA/large" --seed "$SEED" ${LARGE_CASES:+--only $LARGE_CASES} \
  >"$LOGS/gen_large.log" 2>&1
rc_large=$?
"$PY" -m python_engine.refgen.tree_fuzz_cases "$DATA/tree_fuzz.kdtr" --cases 400 --seed "$SEED" >"$LOGS/gen_fuzz.log" 2>&1
rc_fuzz=$?
if [ $rc_large -eq 0 ] && [ $rc_fuzz -eq 0 ]; then
  row "generate cases" ok "$(( $(date +%s) - t0 )) s; $(ls "$DATA/large" | wc -l) attention files, 400 tree cases"
else row "generate cases" FAILED "see $LOGS/gen_large.log, gen_fuzz.log"; status=1; tail -20 "$LOGS/gen_large.log"; fi

# 3. native tests
run_test() {  # name, then env assignments
  local name=$1; shift
  local t0=$(date +%s)
  if [ ! -x "$BIN/$name" ]; then row "$name" FAILED "not built"; status=1; return; fi
  env "$@" timeout 300 "$BIN/$name" >"$LOGS/$name.log" 2>&1
  local rc=$? line
  line=$(summary_line "$LOGS/$name.log")
  if [ $rc -eq 0 ]; then row "$name" ok "$(( $(date +%s) - t0 )) s; $line"
  else row "$name" FAILED "exit $rc; ${line:-no summary}; $LOGS/$name.log"; status=1; grep -E 'FAILED|error|    ' "$LOGS/$name.log" | head -20; fi
}
run_test test_tree_build KDTREE_TREE_FUZZ="$DATA/tree_fuzz.kdtr"
run_test test_tree_accept
run_test test_verify_attn KDTREE_LARGE_ATTN_DIR="$DATA/large"
rm -rf "$DATA"

# 4. bench
if [ -x "$BIN/bench_kernels" ] && [ "$(left)" -gt 60 ]; then
  t0=$(date +%s)
  timeout 180 "$BIN/bench_kernels" --json "$LOGS/bench.json" >"$LOGS/bench.log" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then row bench ok "$(( $(date +%s) - t0 )) s; $LOGS/bench.json"
  else row bench FAILED "exit $rc; $LOGS/bench.log"; status=1; tail -5 "$LOGS/bench.log"; fi
else row bench skipped "not built or no time left"; fi

# 5. compute-sanitizer on the small cases (KDTREE_SANITIZE_QUICK skips the largest bundles)
sanitize() {  # tool, test binary
  local tool=$1 name=$2 budget
  budget=$(( $(left) - 15 ))
  if [ "$budget" -lt 20 ]; then row "$tool $name" skipped "no time left"; return; fi
  [ "$budget" -gt 150 ] && budget=150
  local log="$LOGS/sanitize_${tool}_${name}.log" t0=$(date +%s)
  KDTREE_SANITIZE_QUICK=1 timeout "$budget" compute-sanitizer --tool "$tool" --error-exitcode 99 \
    $( [ "$tool" = memcheck ] && echo --leak-check full ) "$BIN/$name" >"$log" 2>&1
  local rc=$? summary
  summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)
  if [ $rc -eq 0 ]; then row "$tool $name" ok "$(( $(date +%s) - t0 )) s; ${summary:-?}; $(summary_line "$log")"
  elif [ $rc -eq 124 ]; then row "$tool $name" TIMEOUT "after ${budget} s; $log"; status=1
  else row "$tool $name" FAILED "exit $rc; ${summary:-?}; $log"; status=1; grep -m 5 -E '=========' "$log"; fi
}
if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck initcheck racecheck; do
    for name in test_tree_accept test_tree_build test_verify_attn; do sanitize "$tool" "$name"; done
  done
else row compute-sanitizer FAILED "not on PATH"; status=1; fi

{
  echo
  if [ -f "$LOGS/bench.log" ]; then echo "bench (median of repeated runs):"; grep -vE '^#' "$LOGS/bench.log" | cut -c1-130; echo; fi
  # the worst relative error of each attention path over all cases (small and large)
  awk '/ rel / { for (i = 1; i < NF; i++) if ($i == "rel") { d = ($0 ~ / f32 /) ? "f32" : "bf16";
         if ($(i + 1) + 0 >= worst[d] + 0) { worst[d] = $(i + 1); line[d] = $0 } } }
       END { for (d in line) printf "worst %-4s attention error: %s\n", d, line[d] }' \
    "$LOGS/test_verify_attn.log" 2>/dev/null | sed 's/  */ /g' | cut -c1-130
  echo
  printf '%-30s %-8s %s\n' step result detail
  printf '%s\n' "${rows[@]}"
  echo "seed $SEED; $(elapsed) s; logs: $LOGS"
} | tee "$LOGS/summary.txt"
exit $status
