#!/usr/bin/env bash
# stop 41 lease 1: our verify_attn against FlashMLA's sm90 dense decode kernel (the strongest
# thing a user would run instead on Hopper) on the bench's shapes, in one lease, rounds
# interleaved: bench_kernels (built here at the commit) and flashmla_bench
# (results/h200/bench/stop41/flashmla: harness.cu + build.sh over FlashMLA 9241ae3 and CUTLASS
# 147f567, built off the GPU machine and carried as build/flashmla/flashmla_bench). Both time a
# call as CUDA events behind a spin kernel with KV sets rotated past L2 (medians).
# Usage (repository root, GPU machine): KDTREE_COMMIT=<sha> OUT=/tmp/o bash <this file>
set -u
export PATH=$PATH:/usr/local/cuda/bin
FM=${FLASHMLA_BENCH:-build/flashmla/flashmla_bench}
{ date -u +%FT%TZ; echo "commit ${KDTREE_COMMIT:-?}"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader; } > "$OUT/env.txt"
python3 -m kdtree_cli build -j 16 bench_kernels > "$OUT/build.log" 2>&1
echo "build: rc=$? $(tail -n 2 "$OUT/build.log" | head -n 1)"
CASES="64,1,1024 64,1,8192 64,1,32768 64,1,131072 64,16,8192 64,16,32768 64,16,131072 64,64,8192 64,64,32768 64,64,131072 8,1,32768 8,1,131072 8,16,32768 8,64,32768"
: > "$OUT/cases.txt"
for c in $CASES; do IFS=, read -r h n p <<< "$c"; echo "verify_attn heads=$h n=$n prefix=$p" >> "$OUT/cases.txt"; done
for r in 1 2 3; do
  timeout 150 build/release/bin/bench_kernels --cases "$OUT/cases.txt" --json "$OUT/ours-$r.json" > "$OUT/ours-$r.log" 2>&1
  echo "ours round $r rc=$?"
  for c in $CASES; do IFS=, read -r h n p <<< "$c"
    timeout 60 "$FM" "$h" "$n" "$p" >> "$OUT/flashmla-$r.txt" 2>&1 || echo "flashmla $h $n $p rc=$?" >> "$OUT/flashmla-$r.txt"
  done
  echo "flashmla round $r done"
done
python3 - "$OUT" <<'PY'
import json, re, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
ours, fm, err = {}, {}, {}
for r in (1, 2, 3):
    p = out / f"ours-{r}.json"
    if p.exists():
        for line in p.read_text().splitlines():
            rec = json.loads(line)
            m = re.search(r"heads=(\d+) n=(\d+) prefix=(\d+)", rec["case"])
            ours.setdefault(tuple(map(int, m.groups())), []).append((rec["ms"] * 1e3, rec.get("config"), rec.get("splits")))
    p = out / f"flashmla-{r}.txt"
    if p.exists():
        for line in p.read_text().splitlines():
            m = re.match(r"flashmla H=(\d+) n=(\d+) prefix=(\d+) us=([\d.]+) .*rel_err=(\S+) splits=(\d+)", line)
            if m:
                k = tuple(map(int, m.groups()[:3]))
                fm.setdefault(k, []).append((float(m.group(4)), int(m.group(6))))
                err[k] = max(err.get(k, 0.0), float(m.group(5)))
print(f"{'H':>3} {'n':>3} {'prefix':>7} {'kdtree us':>10} {'FlashMLA us':>12} {'FlashMLA/kdtree':>15} {'TFLOP/s (kd / FM)':>18} {'FM err':>9}  plans")
for k in sorted(set(ours) | set(fm)):
    h, n, p = k
    flops = 2 * h * (n + 1) * p * (576 + 512)
    o = statistics.median(x[0] for x in ours.get(k, [(float("nan"), 0, 0)]))
    f = statistics.median(x[0] for x in fm.get(k, [(float("nan"), 0)]))
    plan = f"ours config {ours[k][0][1]} x {ours[k][0][2]} splits; FM {fm[k][0][1]} splits" if k in ours and k in fm else ""
    print(f"{h:>3} {n:>3} {p:>7} {o:>10.1f} {f:>12.1f} {f / o:>15.2f} {flops / o / 1e6:>8.0f} / {flops / f / 1e6:<8.0f} {err.get(k, float('nan')):>9.2e}  {plan}")
PY
