#!/usr/bin/env bash
# One lease for the W4A16 decode pair (stop 29): bench_moe builds of this tree (its ring depths
# by -D, one with the per-CTA timeline) and of .ab/base (carried: an earlier commit's sources),
# built in parallel; the GPU test of the pair; scripts/moe_ab.py over the builds; the timeline.
# Usage (repository root, GPU machine): OUT=/tmp/o [W4AB_VARIANTS="s48 s44 s34 tl"] [W4AB_IMPL="int4 int4_gridwait"]
#   [W4AB_TOKENS="1 8 64"] [W4AB_ROUNDS=3] [W4AB_ENGINE=1] scripts/w4_stages_ab.sh
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/o}; mkdir -p "$OUT"
{ date -u +%FT%TZ; echo "commit ${KDTREE_COMMIT:-?}"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > "$OUT/env.txt"
# sSP: SwiGLU ring S blocks, plain P (the default is s48); d816: deep rings, so fewer CTAs fit
# an SM and the block scheduler spreads the later waves over the SMs that free first; hsS: the
# down GEMM in S slices under the slot hand-off (hs4 changes its bits: the pair's test fails)
declare -A FL=([s48]="" [s44]="-DKD_W4_PLAIN_STAGES=4" [s34]="-DKD_W4_SWIGLU_STAGES=3 -DKD_W4_PLAIN_STAGES=4"
               [d816]="-DKD_W4_SWIGLU_STAGES=8 -DKD_W4_PLAIN_STAGES=16" [tl]="-DKD_W4_TIMELINE"
               [hs1]="-DKD_W4_HANDOFF_DOWN_SLICES=1" [hs4]="-DKD_W4_HANDOFF_DOWN_SLICES=4")
t0=$(date +%s)
VARIANTS=${W4AB_VARIANTS:-s48 s44 s34 tl}
for v in $VARIANTS; do
  targets="bench_moe test_moe_w4a16"; [ "$v" = tl ] && targets=bench_moe
  ( env NVCC_APPEND_FLAGS="${FL[$v]}" python3 -m kdtree_cli build --build-dir "build-$v" -j 3 $targets > "$OUT/build-$v.log" 2>&1
    echo "rc=$?" >> "$OUT/build-$v.log" ) &
done
( cd .ab/base && python3 -m kdtree_cli build -j 3 bench_moe > "$OUT/build-base.log" 2>&1; echo "rc=$?" >> "$OUT/build-base.log" ) &
# W4AB_ENGINE=1: also the engine library, for the INT4 DDTree == AR tests on the GPU engine
[ "${W4AB_ENGINE:-0}" = 1 ] && ( python3 -m kdtree_cli build -j 6 > "$OUT/build-engine.log" 2>&1; echo "rc=$?" >> "$OUT/build-engine.log" ) &
wait
echo "builds $(( $(date +%s) - t0 )) s"; for f in "$OUT"/build-*.log; do echo "$f $(tail -n1 "$f")"; done
for v in $VARIANTS; do [ "$v" = tl ] && continue
  for seed in 1 2; do KDTREE_TEST_SEED=$seed timeout 120 "build-$v/release/bin/test_moe_w4a16" > "$OUT/test-$v-$seed.log" 2>&1
    echo "test $v seed $seed: rc=$? $(tail -n1 "$OUT/test-$v-$seed.log")"; done; done
builds=(base=.ab/base/build/release/bin/bench_moe)
for v in $VARIANTS; do [ "$v" != tl ] && builds+=("$v=build-$v/release/bin/bench_moe"); done
timeout 400 python3 scripts/moe_ab.py "${builds[@]}" --tokens ${W4AB_TOKENS:-1 8 64} --rounds ${W4AB_ROUNDS:-3} \
  --impl ${W4AB_IMPL:-int4 int4_gridwait} --json "$OUT/stages.json" > "$OUT/stages.log" 2>&1
echo "ab rc=$? $(( $(date +%s) - t0 )) s"
[[ " $VARIANTS " == *" tl "* ]] && python3 -c "from kdtree_cli.bench.moe import MoeShape, routing_tensors; from python_engine.kdtr import write_kdtr; \
write_kdtr('$OUT/tl-routing.kdtr', routing_tensors(MoeShape(), (1, 8), 4, 0))"
[[ " $VARIANTS " == *" tl "* ]] && timeout 120 build-tl/release/bin/bench_moe --routing "$OUT/tl-routing.kdtr" --reps 20 > "$OUT/moetl.jsonl" 2> "$OUT/moetl.log"
echo "timeline rc=$? $(( $(date +%s) - t0 )) s"
if [ "${W4AB_ENGINE:-0}" = 1 ]; then
  KDTREE_NATIVE_VARIANT=gpu timeout 240 python3 -m pytest -q -s -p no:cacheprovider tests/native/test_native_decode.py -k int4 \
    > "$OUT/int4-decode.log" 2>&1
  echo "int4 decode tests rc=$? $(tail -n1 "$OUT/int4-decode.log") $(( $(date +%s) - t0 )) s"
fi
grep -v "^round" "$OUT/stages.log"
# everything in one archive beside env.txt and the A/B table (the device tool returns 8 files)
cd "$OUT" && tar czf logs.tgz --exclude=logs.tgz --exclude='*.kdtr' ./* 2>/dev/null
find . -type f ! -name logs.tgz ! -name env.txt ! -name stages.log -delete
