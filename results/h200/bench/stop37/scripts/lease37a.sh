#!/usr/bin/env bash
# stop 37 lease 1: verify_attn's fixed costs at the split-KV shapes. Variants of one tree:
# new (the merge as a programmatic dependent launch), nopdl (plain launch), and two diagnostic
# overlays that leave a stage out to time it (nomerge: no merge launch; nostore: no merge and
# one float a thread instead of the partial O rows). Then Nsight Compute's per-kernel durations.
set -u
export PATH=$PATH:/usr/local/cuda/bin
T0=$(date +%s)
AB_FAMILY=attn AB_ROUNDS=2 AB_CASES=scripts/attn_ab_cases_short.txt AB_CLK_VARIANTS="new" AB_TESTS="new" \
  AB_SANITIZERS="" AB_VARIANTS="new= nopdl=-DKD_VERIFY_MERGE_PDL=0 nomerge=+ab/diag-nomerge nostore=+ab/diag-nostore" \
  timeout 440 bash scripts/kernel_variants_ab.sh > "$OUT/ab.txt" 2>&1
echo "ab rc=$? at $(( $(date +%s) - T0 )) s"
cat > /tmp/ncu_cases.txt <<'C'
verify_attn heads=64 n=1 prefix=1024 reps=3 warm=1
verify_attn heads=64 n=1 prefix=32768 reps=3 warm=1
verify_attn heads=8 n=1 prefix=32768 reps=3 warm=1
verify_attn heads=8 n=16 prefix=32768 reps=3 warm=1
C
timeout 100 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
  build/release/bin/bench_kernels --cases /tmp/ncu_cases.txt > "$OUT/ncu.csv" 2>&1
echo "ncu rc=$? at $(( $(date +%s) - T0 )) s"
python3 - "$OUT/ncu.csv" <<'PY'
import csv, sys
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") == "gpu__time_duration.sum":
        print(f'{r["ID"]:>4} {r["Kernel Name"][:60]:60} {r["Grid Size"]:>16} {r["Metric Value"]:>10} {r["Metric Unit"]}')
PY
tail -n 60 "$OUT/ab.txt"
