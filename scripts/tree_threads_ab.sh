#!/usr/bin/env bash
# One lease: bench_kernels built with tree_build's block at 512 threads (the default) and at
# each of W_THREADS (-DKD_TREE_BUILD_THREADS, measuring builds), the cases of
# scripts/tree_ab_cases.txt run twice per build in turn; prints one line per (case, build): the
# median of the two runs' medians (us), in a graph, and the trees that differ from the heap.
# Usage (repository root, GPU machine): OUT=/tmp/o [W_THREADS="256"] scripts/tree_threads_ab.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/o}; mkdir -p "$OUT"
{ date -u +%FT%TZ; echo "commit ${KDTREE_COMMIT:-?}"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > "$OUT/env.txt"
VARIANTS="512 ${W_THREADS:-256}"
for v in $VARIANTS; do
  flags=""; [ "$v" != 512 ] && flags="-DKD_TREE_BUILD_THREADS=$v"
  ( env NVCC_APPEND_FLAGS="$flags" python3 -m kdtree_cli build --build-dir "build-t$v" -j 8 bench_kernels > "$OUT/build-$v.log" 2>&1
    echo "rc=$?" >> "$OUT/build-$v.log" ) &
done
wait
for v in $VARIANTS; do echo "build $v: $(tail -n1 "$OUT/build-$v.log")"; done
for r in 1 2; do for v in $VARIANTS; do
  timeout 200 "build-t$v/release/bin/bench_kernels" --cases scripts/tree_ab_cases.txt --json "$OUT/t$v-$r.json" > "$OUT/t$v-$r.log" 2>&1
  echo "run $r build $v: rc=$?"; done; done
python3 - "$OUT" $VARIANTS <<'PY'
import json, statistics, sys
from pathlib import Path
out, variants = Path(sys.argv[1]), sys.argv[2:]
rows = {}
for v in variants:
    for r in (1, 2):
        path = out / f"t{v}-{r}.json"
        if not path.exists(): continue
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            rows.setdefault((rec["case"], v), []).append(rec)
print(f"{'case':<52} {'threads':>7} {'us':>8} {'graph us':>9} {'differ':>6}")
for (key, v), recs in sorted(rows.items()):
    ms = statistics.median(x.get("ms", float("nan")) for x in recs)
    g = statistics.median(x.get("graph_ms", float("nan")) for x in recs)
    d = max(x.get("trees_differing_from_heap", -1) for x in recs)
    print(f"{key:<52} {v:>7} {ms * 1e3:8.1f} {g * 1e3:9.1f} {d:>6}")
PY
cd "$OUT" && tar czf logs.tgz --exclude=logs.tgz ./*.log ./*.json 2>/dev/null && find . -type f -name 'build-*.log' -delete
