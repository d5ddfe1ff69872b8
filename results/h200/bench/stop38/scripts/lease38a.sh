#!/usr/bin/env bash
# stop 38 lease 1: the key tiles brought into L2 ahead of their copies (seesaw: pairs ahead,
# KD_SEESAW_L2_PREFETCH; decode: tiles ahead, KD_DECODE_L2_PREFETCH) against none, 1 and 4;
# test_verify_attn on the default (the cluster probe's first GPU run among its tests), memcheck;
# phase clocks of the default at H=64 n=1 and H=8 n=1, 32k.
set -u
export PATH=$PATH:/usr/local/cuda/bin
T0=$(date +%s)
S=results/h200/bench/stop38/scripts
AB_FAMILY=attn AB_ROUNDS=2 AB_CASES=$S/pf_cases.txt AB_CLK_VARIANTS="new nopf" AB_CLK_CASES=$S/pf_clk_cases.txt \
  AB_TESTS="new" AB_SANITIZERS="memcheck" \
  AB_VARIANTS="new= nopf=-DKD_SEESAW_L2_PREFETCH=0,-DKD_DECODE_L2_PREFETCH=0 pf1=-DKD_SEESAW_L2_PREFETCH=1,-DKD_DECODE_L2_PREFETCH=1 pf4=-DKD_SEESAW_L2_PREFETCH=4,-DKD_DECODE_L2_PREFETCH=4" \
  timeout 500 bash scripts/kernel_variants_ab.sh > "$OUT/ab.txt" 2>&1
echo "ab rc=$? at $(( $(date +%s) - T0 )) s"
tar xzf "$OUT/logs.tgz" -C /tmp ./test-new.log 2>/dev/null; grep -iE "cluster|passed|FAIL" /tmp/test-new.log | head -12
grep -v "^round" "$OUT/ab.txt" | tail -n 60
