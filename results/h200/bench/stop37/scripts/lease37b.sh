#!/usr/bin/env bash
# stop 37 lease 2: verify_attn's epilogue and merge as variants of one tree: new (PDL, the
# one-round-trip merge, partials staged in shared memory), direct (fragments stored directly),
# oldmerge (the lse-first merge), base (644b40a's kernels: no PDL, old merge, direct stores).
set -u
export PATH=$PATH:/usr/local/cuda/bin
T0=$(date +%s)
AB_FAMILY=attn AB_ROUNDS=3 AB_CASES=scripts/attn_ab_cases_short.txt AB_TESTS="new" AB_SANITIZERS="memcheck initcheck" \
  AB_VARIANTS="new= direct=-DKD_SEESAW_STAGED_PARTIALS=0 mb8=-DKD_MERGE_BATCH=8 oldmerge=+ab/oldmerge base=+ab/base" \
  timeout 540 bash scripts/kernel_variants_ab.sh > "$OUT/ab.txt" 2>&1
echo "ab rc=$? at $(( $(date +%s) - T0 )) s"
grep -v "^round" "$OUT/ab.txt" | tail -n 60
