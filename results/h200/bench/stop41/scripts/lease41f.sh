#!/usr/bin/env bash
# stop 41 lease 6: `kdtree bench all` at the commit (build, native tests on fresh large cases,
# compute-sanitizer memcheck / racecheck / initcheck, the kernel bench with its baselines) with
# config 10's second-wave check (7508c8f), against 91a04b3's and lease 4's (87c5064).
# Usage (repository root, GPU machine): KDTREE_COMMIT=<sha> OUT=/tmp/o bash <this file>
set -u
export PATH=$PATH:/usr/local/cuda/bin
T0=$(date +%s)
timeout 545 python3 -m kdtree_cli bench all --out /tmp/all --budget-s 440 > "$OUT/benchall.log" 2>&1
echo "bench all rc=$? at $(( $(date +%s) - T0 )) s"
for f in summary.md bench.md bench.json attention.png tree_topk.png; do cp "/tmp/all/$f" "$OUT/" 2>/dev/null; done
(cd /tmp/all && tar czf "$OUT/logs.tar.gz" --exclude='*.png' . 2>/dev/null)
cat "$OUT/summary.md" 2>/dev/null | head -60
tail -5 "$OUT/benchall.log"
