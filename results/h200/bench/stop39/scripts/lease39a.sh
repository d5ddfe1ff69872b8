#!/usr/bin/env bash
# stop 39 lease 1: config 10's splits reduced in pairs through distributed shared memory (new)
# against one partial a split (nopair, -DKD_SEESAW_PAIRS=0); test_verify_attn and memcheck on
# new; the device's cluster capacity at config 10's size.
set -u
export PATH=$PATH:/usr/local/cuda/bin
T0=$(date +%s)
S=results/h200/bench/stop39/scripts
nvcc -O2 -arch=sm_90a -o /tmp/cluster_slots $S/cluster_slots.cu && /tmp/cluster_slots | tee "$OUT/cluster_slots.txt"
AB_FAMILY=attn AB_ROUNDS=2 AB_CASES=$S/attn_pair_cases.txt AB_TESTS="new" AB_SANITIZERS="memcheck" \
  AB_VARIANTS="new= nopair=-DKD_SEESAW_PAIRS=0" timeout 480 bash scripts/kernel_variants_ab.sh > "$OUT/ab.txt" 2>&1
echo "ab rc=$? at $(( $(date +%s) - T0 )) s"
tar xzf "$OUT/logs.tgz" -C /tmp ./test-new.log 2>/dev/null; grep -E "passed|FAIL|failed" /tmp/test-new.log | tail -4
grep -v "^round" "$OUT/ab.txt" | tail -n 30
