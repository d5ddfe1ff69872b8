#!/usr/bin/env bash
# One lease for tree_build's searches (issue 13): one bench_kernels build timed with the
# one-pass search (the default) and with the sweep alone (KD_TREE_SEARCH=sweep), the cases of
# scripts/tree_ab_cases.txt TREE_AB_ROUNDS times each in turn; the GPU tree test with each
# search, and under compute-sanitizer memcheck and racecheck; phase clocks (a
# -DKD_TREE_PHASE_CLOCKS build, build-clk/) for the cases of scripts/tree_clk_cases.txt.
# Prints a table last (per case and search: the median of the rounds' medians, us); logs and
# JSON in $OUT/logs.tgz.
# Usage (repository root, GPU machine):
#   OUT=/tmp/o [TREE_AB_ROUNDS=3] [TREE_AB_SANITIZERS="memcheck racecheck"] scripts/tree_search_ab.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/o}; mkdir -p "$OUT"
ROUNDS=${TREE_AB_ROUNDS:-3}
SEARCHES="onepass sweep"
{ date -u +%FT%TZ; echo "commit ${KDTREE_COMMIT:-?}"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader; } > "$OUT/env.txt"
# the two builds side by side (16 cores)
( python3 -m kdtree_cli build -j 10 bench_kernels test_tree_build > "$OUT/build.log" 2>&1
  echo "rc=$?" >> "$OUT/build.log" ) &
( env NVCC_APPEND_FLAGS=-DKD_TREE_PHASE_CLOCKS python3 -m kdtree_cli build --build-dir build-clk -j 6 bench_kernels \
    > "$OUT/build-clk.log" 2>&1; echo "rc=$?" >> "$OUT/build-clk.log" ) &
wait
echo "build: $(tail -n1 "$OUT/build.log"); clk build: $(tail -n1 "$OUT/build-clk.log")"
BIN=build/release/bin
for s in $SEARCHES; do
  env KD_TREE_SEARCH=$s timeout 180 $BIN/test_tree_build > "$OUT/test-$s.log" 2>&1
  echo "test_tree_build ($s): rc=$? $(grep -E '^[0-9]+ passed' "$OUT/test-$s.log" | tail -1)"
done
for tool in ${TREE_AB_SANITIZERS-memcheck racecheck}; do
  timeout 400 compute-sanitizer --tool "$tool" --error-exitcode 9 $BIN/test_tree_build > "$OUT/san-$tool.log" 2>&1
  echo "$tool: rc=$? $(grep -E 'SUMMARY' "$OUT/san-$tool.log" | tail -1); $(grep -E '^[0-9]+ passed' "$OUT/san-$tool.log" | tail -1)"
done
for r in $(seq "$ROUNDS"); do for s in $SEARCHES; do
  env KD_TREE_SEARCH=$s timeout 200 $BIN/bench_kernels --cases scripts/tree_ab_cases.txt --json "$OUT/$s-$r.json" \
    > "$OUT/$s-$r.log" 2>&1
  echo "round $r $s: rc=$?"; done; done
while read -r -u 3 c; do [ -z "$c" ] && continue
  echo "$c" > "$OUT/clk_case.txt"
  echo "== $c"; timeout 60 build-clk/release/bin/bench_kernels --cases "$OUT/clk_case.txt" 2>&1 | grep tree_clk | tail -2
done 3< scripts/tree_clk_cases.txt > "$OUT/clk.txt"
cat "$OUT/clk.txt"
python3 - "$OUT" "$ROUNDS" $SEARCHES <<'PY'
import json, statistics, sys
from pathlib import Path
out, rounds, searches = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
rows = {}
for s in searches:
    for r in range(1, rounds + 1):
        path = out / f"{s}-{r}.json"
        if not path.exists(): continue
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            rows.setdefault((rec["case"], s), []).append(rec)
print(f"{'case':<52} {'search':>8} {'us':>8} {'graph us':>9} {'spread':>7} {'differ':>6}")
for (key, s), recs in sorted(rows.items()):
    ms = [x.get("ms", float("nan")) for x in recs]
    g = statistics.median(x.get("graph_ms", float("nan")) for x in recs)
    d = max(x.get("trees_differing_from_heap", -1) for x in recs)
    print(f"{key:<52} {s:>8} {statistics.median(ms) * 1e3:8.1f} {g * 1e3:9.1f} {(max(ms) - min(ms)) * 1e3:7.1f} {d:>6}")
PY
cd "$OUT" && tar czf logs.tgz --exclude=logs.tgz ./*.log ./*.json ./*.txt 2>/dev/null && rm -f ./*.log ./*.json
