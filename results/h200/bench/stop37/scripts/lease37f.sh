#!/usr/bin/env bash
# stop 37 lease 6: the narrow decode tile (config 11, <= 16 rows) against config 3 on the same
# shapes (one binary, the config forced), its GPU tests (committed bundles, memcheck, initcheck,
# fresh large decode cases).
set -u
export PATH=$PATH:/usr/local/cuda/bin
T0=$(date +%s)
AB_FAMILY=attn AB_ROUNDS=2 AB_CASES=ab/narrow_cases.txt AB_TESTS=new AB_SANITIZERS="memcheck initcheck" \
  AB_VARIANTS="new=" timeout 200 bash scripts/kernel_variants_ab.sh > "$OUT/ab.txt" 2>&1
echo "ab rc=$? at $(( $(date +%s) - T0 )) s"
SEED=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
timeout 40 python3 -m python_engine.refgen.large_attn_cases /tmp/large --seed "$SEED" \
  --only p2048_h8_n1_b2 p131072_h8_n1 p32768_h8_n1_b3 p65536_h16_n1 > "$OUT/gen.log" 2>&1
echo "gen rc=$? seed $SEED at $(( $(date +%s) - T0 )) s"
KDTREE_LARGE_ATTN_DIR=/tmp/large timeout 60 build/release/bin/test_verify_attn large_cases_from_env > "$OUT/large.log" 2>&1
echo "large rc=$? at $(( $(date +%s) - T0 )) s: $(grep -E '^[0-9]+ passed' "$OUT/large.log")"
grep -E "cfg|config|bf16|f32" "$OUT/large.log" | head -20
grep -v "^round" "$OUT/ab.txt" | tail -n 24
