set -u
export PATH=$PATH:/usr/local/cuda/bin
python3 -m kdtree_cli build -j 16 bench_kernels test_verify_attn > "$OUT/build.log" 2>&1; echo "build rc=$?"
timeout 120 build/release/bin/test_verify_attn > "$OUT/test.log" 2>&1; echo "test_verify_attn rc=$? $(grep -E '^[0-9]+ passed' "$OUT/test.log" | tail -1)"
printf 'verify_attn heads=64 n=16 prefix=32768\nverify_attn heads=8 n=1 prefix=8192\nverify_attn heads=64 n=1 prefix=32768\n' > "$OUT/c.txt"
timeout 60 build/release/bin/bench_kernels --cases "$OUT/c.txt" --json "$OUT/b.json" > "$OUT/b.log" 2>&1; echo "bench rc=$?"
python3 -c "
import json,sys
for l in open('$OUT/b.json'): r=json.loads(l); print(r['case'], round(r['ms']*1e3,1), 'us', r['splits'], 'splits')"
