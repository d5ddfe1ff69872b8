#!/usr/bin/env bash
# stop 39's lease, not run at stop 39 (its session had no device time left): config 10's splits
# reduced in pairs through distributed shared memory (split_group=2 cases) against one partial
# a split (split_group=1), one build, both in the same rounds; test_verify_attn (its
# seesaw_pairs test runs the pairs on the GPU) with memcheck; the device's cluster capacity at
# config 10's size (a pair grid of 132 CTAs must be one wave); then `kdtree bench all`.
# Usage (repository root, GPU machine): KDTREE_COMMIT=<sha> OUT=/tmp/o bash <this file>
set -u
export PATH=$PATH:/usr/local/cuda/bin
T0=$(date +%s)
S=results/h200/bench/stop39/scripts
nvcc -O2 -arch=sm_90a -o /tmp/cluster_slots $S/cluster_slots.cu && /tmp/cluster_slots | tee "$OUT/cluster_slots.txt"
AB_FAMILY=attn AB_ROUNDS=2 AB_CASES=$S/attn_pair_cases.txt AB_TESTS="new" AB_SANITIZERS="memcheck" \
  AB_VARIANTS="new=" timeout 300 bash scripts/kernel_variants_ab.sh > "$OUT/ab.txt" 2>&1
echo "ab rc=$? at $(( $(date +%s) - T0 )) s"
tar xzf "$OUT/logs.tgz" -C /tmp ./test-new.log 2>/dev/null; grep -E "seesaw|passed|FAIL|failed" /tmp/test-new.log | tail -14
grep -v "^round" "$OUT/ab.txt" | tail -n 24
