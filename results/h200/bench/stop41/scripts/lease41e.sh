#!/usr/bin/env bash
# stop 41 lease 5: config 10's second-wave check (verify_attn_plan.h, kVerifySecondWaveTiles 8)
# at every shape of a plan sweep where it changes the split count (two waves -> the fullest
# single wave), each timed with the new plan and with the old split length forced
# (split_keys=), three rounds in one build of bench_kernels at the working tree.
# Usage (repository root, GPU machine): KDTREE_COMMIT=<sha> OUT=/tmp/o bash <this file>
set -u
export PATH=$PATH:/usr/local/cuda/bin
CASES=results/h200/bench/stop41/scripts/second_wave_cases.txt
{ date -u +%FT%TZ; echo "commit ${KDTREE_COMMIT:-?}"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader; } > "$OUT/env.txt"
python3 -m kdtree_cli build -j 16 bench_kernels test_verify_attn > "$OUT/build.log" 2>&1
echo "build: rc=$? $(tail -n 2 "$OUT/build.log" | head -n 1)"
timeout 120 build/release/bin/test_verify_attn > "$OUT/test.log" 2>&1
echo "test_verify_attn: rc=$? $(grep -E '^[0-9]+ passed' "$OUT/test.log" | tail -1)"
for r in 1 2 3; do
  timeout 150 build/release/bin/bench_kernels --cases "$CASES" --json "$OUT/r$r.json" > "$OUT/r$r.log" 2>&1
  echo "round $r rc=$?"
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
from pathlib import Path
out = Path(sys.argv[1]); rows = {}
for r in (1, 2, 3):
    p = out / f"r{r}.json"
    if p.exists():
        for line in p.read_text().splitlines():
            rec = json.loads(line); rows.setdefault(rec["case"], []).append(rec)
print(f"{'case':<64} {'us':>8} {'spread':>7}  plan")
for case, recs in rows.items():
    ms = [x["ms"] for x in recs]
    print(f"{case:<64} {statistics.median(ms) * 1e3:8.1f} {(max(ms) - min(ms)) * 1e3:7.1f}  splits={recs[0]['splits']} split_keys={recs[0]['split_keys']}")
PY
cd "$OUT" && tar czf logs.tgz ./*.log ./*.json && rm -f ./*.log ./*.json
