#!/usr/bin/env bash
# stop 38 lease 6: config 11 as 32-key tiles in two stages with two blocks a SM (two: one block's
# wait for its tile overlaps the other's compute) against 64 x 2, one block a SM (new);
# test_verify_attn on two.
set -u
export PATH=$PATH:/usr/local/cuda/bin
T0=$(date +%s)
S=results/h200/bench/stop38/scripts
AB_FAMILY=attn AB_ROUNDS=2 AB_CASES=$S/decode_cases.txt AB_TESTS="two" AB_SANITIZERS="" \
  AB_VARIANTS="new= two=-DKD_DECODE_NARROW_TWO_PER_SM=1" timeout 240 bash scripts/kernel_variants_ab.sh > "$OUT/ab.txt" 2>&1
echo "ab rc=$? at $(( $(date +%s) - T0 )) s"
grep -v "^round" "$OUT/ab.txt" | grep -E "two|new|test_" | tail -n 22
