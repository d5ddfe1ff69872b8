#!/usr/bin/env bash
# GPU check: on a CUDA machine (the H200), build csrc/ with the auto-detected
# target and run the native tests; print a short table. Logs go to $OUT when it is set.
#
#   scripts/gpu_check.sh              # from anywhere in the repository
#   OUT=/some/dir scripts/gpu_check.sh
#   GPU_CHECK_DEBUG=1 scripts/gpu_check.sh   # also the debug profile (-G): build and tests
#
# Needs: python3 with typer, rich, numpy and ninja (torch not needed here), nvcc at
# /usr/local/cuda or on PATH (or CUDA_HOME), cuBLAS in that toolkit (or the nvidia-cublas wheel).
# Exit status: 0 when the build and every native test passed.
set -uo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
LOGS=${OUT:-$(mktemp -d -t kdtree-gpu-check.XXXXXX)}
mkdir -p "$LOGS"
unset KDTREE_CUDA_ARCH  # the point is auto-detection from the visible GPU
status=0
declare -a rows=()

row() { rows+=("$(printf '%-34s %-8s %s' "$1" "$2" "$3")"); }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

{
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(hostname)"
  echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo '(no git)')"
  nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader 2>&1 || echo "nvidia-smi failed"
  (command -v nvcc && nvcc --version | tail -2) 2>&1 || echo "nvcc not on PATH"
  "$PY" --version 2>&1
  "$PY" -c 'import ninja, rich, typer; print("ninja", ninja.__version__)' 2>&1
} | tee "$LOGS/env.txt"

# 1. Full build with the auto-detected target (a fresh build directory).
rm -rf build/release
t0=$(now)
"$PY" -m kdtree_cli build --verbose >"$LOGS/build.log" 2>&1
rc=$?
t1=$(now)
targets=$(grep -o 'targets [^;]*' "$LOGS/build.log" | tail -1)
if [ $rc -eq 0 ]; then row "build (auto arch)" ok "$(secs "$t0" "$t1") s; $targets"
else row "build (auto arch)" FAILED "exit $rc, see $LOGS/build.log"; status=1; tail -40 "$LOGS/build.log"; fi
case "$targets" in *sm_90a*) ;; *) [ $rc -eq 0 ] && { row "auto-detected sm_90a" FAILED "$targets"; status=1; } ;; esac

# 2. No-op rebuild: end to end and ninja alone.
t0=$(now); "$PY" -m kdtree_cli build >"$LOGS/noop.log" 2>&1; rc=$?; t1=$(now)
ninja_bin=$("$PY" -c 'import ninja, os; print(os.path.join(ninja.BIN_DIR, "ninja"))' 2>/dev/null || command -v ninja)
t2=$(now); "$ninja_bin" -C build/release >>"$LOGS/noop.log" 2>&1; t3=$(now)
if [ $rc -eq 0 ] && grep -q "up to date" "$LOGS/noop.log"; then
  row "no-op rebuild" ok "kdtree build $(secs "$t0" "$t1") s, ninja $(secs "$t2" "$t3") s"
else row "no-op rebuild" FAILED "see $LOGS/noop.log"; status=1; fi

# 3. Native tests (GPU cases run here instead of being skipped).
t0=$(now)
"$PY" -m kdtree_cli test --native >"$LOGS/native_tests.log" 2>&1
rc=$?
t1=$(now)
totals=$(grep -E '^(│|\|) *total' "$LOGS/native_tests.log" | tr -s ' │|' ' ' |
         awk '{ printf "%s passed, %s failed, %s skipped", $2, $3, $4 }')
if [ $rc -eq 0 ]; then row "test --native" ok "$(secs "$t0" "$t1") s; $totals"
else row "test --native" FAILED "exit $rc; $totals; see $LOGS/native_tests.log"; status=1; tail -60 "$LOGS/native_tests.log"; fi
mkdir -p "$LOGS/test-logs" && cp build/release/test-logs/*.log "$LOGS/test-logs/" 2>/dev/null
cat "$LOGS"/test-logs/*.log 2>/dev/null | grep -E '^\[ SKIPPED' >"$LOGS/skipped.txt" || true

# 4. Optional: the debug profile (device code with -G; KD_CHECK_LAUNCH synchronises).
if [ "${GPU_CHECK_DEBUG:-0}" = 1 ]; then
  t0=$(now)
  "$PY" -m kdtree_cli test --native --profile debug >"$LOGS/native_tests_debug.log" 2>&1
  rc=$?
  t1=$(now)
  if [ $rc -eq 0 ]; then row "test --native --profile debug" ok "$(secs "$t0" "$t1") s (build included)"
  else row "test --native --profile debug" FAILED "exit $rc; see $LOGS/native_tests_debug.log"; status=1; fi
fi

{
  echo
  printf '%-34s %-8s %s\n' step result detail
  printf '%s\n' "${rows[@]}"
  echo "skipped cases: $(wc -l <"$LOGS/skipped.txt") (list: $LOGS/skipped.txt; each program's output: $LOGS/test-logs/)"
  echo "logs: $LOGS"
} | tee "$LOGS/summary.txt"
exit $status
