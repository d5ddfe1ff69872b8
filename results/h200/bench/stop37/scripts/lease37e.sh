#!/usr/bin/env bash
# stop 37 lease 5: the decode kernel's phase clocks (block 0) at H=8 n=1 (and n=0: AR decode).
set -u
export PATH=$PATH:/usr/local/cuda/bin
AB_FAMILY=attn AB_ROUNDS=1 AB_CASES=ab/decode_cases.txt AB_TESTS=none AB_SANITIZERS="" AB_CLK_VARIANTS=new \
  AB_CLK_CASES=ab/decode_clk_cases.txt AB_VARIANTS="new=" timeout 400 bash scripts/kernel_variants_ab.sh > "$OUT/ab.txt" 2>&1
echo "rc=$?"; cat "$OUT/ab.txt" | grep -v "^round"
