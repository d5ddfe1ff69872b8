#!/usr/bin/env bash
# stop 38 lease 3: the decode kernel's bulk copies issued by every warp (new, with S in two MMA
# chains) against the cp.async form with the same S (cp); test_verify_attn on new with memcheck
# and initcheck; fresh large decode cases; phase clocks of both.
set -u
export PATH=$PATH:/usr/local/cuda/bin
T0=$(date +%s)
S=results/h200/bench/stop38/scripts
AB_FAMILY=attn AB_ROUNDS=2 AB_CASES=$S/decode_cases.txt AB_CLK_VARIANTS="new cp" AB_CLK_CASES=$S/decode_clk_cases.txt \
  AB_TESTS="new" AB_SANITIZERS="memcheck initcheck" AB_VARIANTS="new= cp=-DKD_DECODE_BULK_KEYS=0" \
  timeout 400 bash scripts/kernel_variants_ab.sh > "$OUT/ab.txt" 2>&1
echo "ab rc=$? at $(( $(date +%s) - T0 )) s"
SEED=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
timeout 40 python3 -m python_engine.refgen.large_attn_cases /tmp/large --seed "$SEED" \
  --only p2048_h8_n1_b2 p131072_h8_n1 p32768_h8_n1_b3 p65536_h16_n1 > "$OUT/gen.log" 2>&1
echo "gen rc=$? seed $SEED at $(( $(date +%s) - T0 )) s"
KDTREE_LARGE_ATTN_DIR=/tmp/large timeout 60 build/release/bin/test_verify_attn large_cases_from_env > "$OUT/large.log" 2>&1
echo "large rc=$? at $(( $(date +%s) - T0 )) s: $(grep -E '^[0-9]+ passed' "$OUT/large.log")"
grep -E "rel|plan" "$OUT/large.log" | head -12
grep -v "^round" "$OUT/ab.txt" | tail -n 40
