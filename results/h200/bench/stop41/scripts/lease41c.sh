#!/usr/bin/env bash
# stop 41 lease 3: config 10 with a mbarrier per 64-column block of a key tile
# (-DKD_SEESAW_BLOCK_BARRIERS=1, FlashMLA's fine-grained TMA/GEMM pipelining) and the split
# search with a wave's fixed cost of 10 key tiles instead of 3 (-DKD_VERIFY_WAVE_FIXED_TILES=10:
# lease 2 measured H=64 n=16 32k 153.5 us with 7 splits (one wave) against 163.1 with the plan's
# 15 (two)), each against the tree as it is; the GPU test and memcheck on the block barriers.
# Usage (repository root, GPU machine): KDTREE_COMMIT=<sha> OUT=/tmp/o bash <this file>
set -u
export PATH=$PATH:/usr/local/cuda/bin
AB_FAMILY=attn AB_ROUNDS=${AB_ROUNDS:-2} AB_TESTS="bb f10" AB_SANITIZERS=memcheck \
  AB_CASES=results/h200/bench/stop41/scripts/seesaw_ab3_cases.txt \
  AB_VARIANTS="bb=-DKD_SEESAW_BLOCK_BARRIERS=1 base= f10=-DKD_VERIFY_WAVE_FIXED_TILES=10" \
  timeout 560 bash scripts/kernel_variants_ab.sh
