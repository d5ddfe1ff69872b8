#!/usr/bin/env bash
# stop 38 lease 5: config 11 with 32-key tiles in four stages (deep: more of the cache in flight,
# the same shared memory) against 64-key tiles in two (new); then the engine on the GPU: the full
# build, the smoke check, DDTree == AR (native and torch) on the demo pairs, float32, bf16, INT4
# (the agree pair stays behind: the 64 MiB carry limit).
set -u
export PATH=$PATH:/usr/local/cuda/bin
T0=$(date +%s)
S=results/h200/bench/stop38/scripts
AB_FAMILY=attn AB_ROUNDS=2 AB_CASES=$S/decode_cases.txt AB_TESTS="deep" AB_SANITIZERS="" \
  AB_VARIANTS="new= deep=-DKD_DECODE_NARROW_KEYS=32" timeout 200 bash scripts/kernel_variants_ab.sh > "$OUT/ab.txt" 2>&1
echo "ab rc=$? at $(( $(date +%s) - T0 )) s"
grep -v "^round" "$OUT/ab.txt" | grep -E "deep|new|test_" | tail -n 22
mkdir -p "$OUT/eng"
OUT=$OUT/eng bash scripts/gpu_engine_run.sh build smoke > "$OUT/steps.txt" 2>&1; tail -3 "$OUT/steps.txt"
echo "engine build at $(( $(date +%s) - T0 )) s"
timeout 240 env KDTREE_NATIVE_VARIANT=gpu python3 -m pytest -q -s -p no:cacheprovider tests/native/test_native_decode.py \
  -k "not agree" > "$OUT/decode.log" 2>&1
echo "decode rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "passed|failed|FAILED|tau" "$OUT/decode.log" | tail -8
(cd "$OUT" && tar czf eng.tgz eng decode.log && rm -rf eng)
