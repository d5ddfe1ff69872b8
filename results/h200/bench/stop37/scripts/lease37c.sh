#!/usr/bin/env bash
# stop 37 lease 3: the committed tree (PDL merge, one-round-trip merge with its wide form)
# against oldmerge (PDL, the lse-first merge) and base (644b40a's kernels), then kdtree bench all.
set -u
export PATH=$PATH:/usr/local/cuda/bin
T0=$(date +%s)
mkdir -p "$OUT/ab"
OUT="$OUT/ab" AB_FAMILY=attn AB_ROUNDS=3 AB_CASES=scripts/attn_ab_cases_short.txt AB_TESTS="new" AB_SANITIZERS="" \
  AB_VARIANTS="new= oldmerge=+ab/oldmerge base=+ab/base" timeout 200 bash scripts/kernel_variants_ab.sh > "$OUT/ab.txt" 2>&1
echo "ab rc=$? at $(( $(date +%s) - T0 )) s"
rm -rf build-v-* src-v-*
timeout $(( 570 - ($(date +%s) - T0) )) python3 -m kdtree_cli bench all --out "$OUT/all" --budget-s $(( 520 - ($(date +%s) - T0) )) > "$OUT/benchall.log" 2>&1
echo "bench all rc=$? at $(( $(date +%s) - T0 )) s"
grep -v "^round" "$OUT/ab.txt" | tail -n 40
tail -n 30 "$OUT/all/summary.md" 2>/dev/null || tail -n 30 "$OUT/benchall.log"
