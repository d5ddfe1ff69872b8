#!/usr/bin/env bash
# stop 40 lease 4: tree_build's counted threshold with each depth's sums loading every rank at
# once (new, KD_DP_BATCHED_SUM=1) against the early-exit groups of four (old), one build, three
# rounds in one process; phase clocks of both; test_tree_build on both; memcheck and racecheck
# on new.
# Usage (repository root, GPU machine): KDTREE_COMMIT=<sha> OUT=/tmp/o bash <this file>
set -u
export PATH=$PATH:/usr/local/cuda/bin
T0=$(date +%s)
AB_FAMILY=tree AB_ROUNDS=3 AB_CLK_VARIANTS="new old" AB_SANITIZERS="memcheck racecheck" \
  AB_VARIANTS="new= old=-DKD_DP_BATCHED_SUM=0" timeout 500 bash scripts/kernel_variants_ab.sh > "$OUT/ab.txt" 2>&1
echo "ab rc=$? at $(( $(date +%s) - T0 )) s"
grep -E "test_|memcheck|racecheck" "$OUT/ab.txt" | head -8
grep -E "tree_clk (B=|onepass steps)" "$OUT/ab.txt" | head -16
grep -v "^round" "$OUT/ab.txt" | grep -E "^case|new|old" | tail -n 20
