#!/usr/bin/env bash
# stop 41 lease 2: config 10 with FlashMLA's overlaps (-DKD_SEESAW_OVERLAP=1: wg0's next S
# issued behind its P_B V, wg1's two P V groups back to back) and evict-first key tiles
# (-DKD_SEESAW_EVICT_FIRST=1), each and both against the kernel as it was, one process order.
# Usage (repository root, GPU machine): KDTREE_COMMIT=<sha> OUT=/tmp/o bash <this file>
set -u
export PATH=$PATH:/usr/local/cuda/bin
AB_FAMILY=attn AB_ROUNDS=${AB_ROUNDS:-2} AB_TESTS="ovl both" \
  AB_CASES=results/h200/bench/stop41/scripts/seesaw_ab_cases.txt \
  AB_VARIANTS="base= ovl=-DKD_SEESAW_OVERLAP=1 ef=-DKD_SEESAW_EVICT_FIRST=1 both=-DKD_SEESAW_OVERLAP=1,-DKD_SEESAW_EVICT_FIRST=1" \
  timeout 560 bash scripts/kernel_variants_ab.sh
