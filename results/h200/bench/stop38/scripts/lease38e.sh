#!/usr/bin/env bash
# stop 38 lease 5: the engine on the GPU after stop 37's merge launch and stop 38's decode kernel:
# the full build, then DDTree == AR (native and torch) on the demo pairs (the agree pair stays
# behind: the 64 MiB carry limit), float32 and bf16, INT4.
set -u
export PATH=$PATH:/usr/local/cuda/bin
OUT=$OUT bash scripts/gpu_engine_run.sh build smoke > "$OUT/steps1.txt" 2>&1; tail -4 "$OUT/steps1.txt"
timeout 300 env KDTREE_NATIVE_VARIANT=gpu python3 -m pytest -q -s -p no:cacheprovider tests/native/test_native_decode.py \
  -k "not agree" > "$OUT/decode.log" 2>&1
echo "decode rc=$?"; tail -4 "$OUT/decode.log"
