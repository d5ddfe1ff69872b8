#!/usr/bin/env bash
# stop 40 lease 3: the engine on the GPU after stop 39's verify_attn changes (workspace and merge
# by parts): the full build, the smoke check, DDTree == AR (native and torch) on the demo pairs,
# float32, bf16, INT4 (the agree pair stays behind: the 64 MiB carry limit).
# Usage (repository root, GPU machine): KDTREE_COMMIT=<sha> OUT=/tmp/o bash <this file>
set -u
export PATH=$PATH:/usr/local/cuda/bin
T0=$(date +%s)
mkdir -p "$OUT/eng"
OUT=$OUT/eng bash scripts/gpu_engine_run.sh build smoke > "$OUT/steps.txt" 2>&1; tail -3 "$OUT/steps.txt"
echo "engine build at $(( $(date +%s) - T0 )) s"
timeout 400 env KDTREE_NATIVE_VARIANT=gpu python3 -m pytest -q -s -p no:cacheprovider tests/native/test_native_decode.py \
  -k "not agree" > "$OUT/decode.log" 2>&1
echo "decode rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "passed|failed|FAILED|tau" "$OUT/decode.log" | tail -8
(cd "$OUT" && tar czf eng.tgz eng decode.log && rm -rf eng)
