#!/usr/bin/env bash
# One lease, several variants of one kernel family (issue 13), timed in one process order: one
# full build of bench_kernels and the family's test, then per variant with compile-time defines
# a copy of that build with only the family's sources recompiled under them (NVCC_APPEND_FLAGS)
# and relinked, so a variant costs a file's compile, not a build; variants with run-time
# settings only (KD_TREE_SEARCH=sweep, say) use the main build. Per variant: the GPU test; the
# cases of AB_CASES timed with each variant in turn, AB_ROUNDS times; phase clocks (AB_CLK_DEFINE
# on top, its own copy) for the variants in AB_CLK_VARIANTS over AB_CLK_CASES; compute-sanitizer
# on the first variant's test for the tools in AB_SANITIZERS. AB_TESTS names the variants whose
# test runs (default: all; a variant that leaves a stage out to time it fails its test).
# Prints a table last (per case and variant: the median of the rounds' medians, us); logs and
# JSON in $OUT/logs.tgz.
# Usage (repository root, GPU machine):
#   OUT=/tmp/o AB_VARIANTS="new= s2=-DKD_ONEPASS_SYNC_DEPTH=2 old=+ab/old sweep=@KD_TREE_SEARCH=sweep" \
#     [AB_FAMILY=tree|attn] [AB_ROUNDS=3] [AB_CLK_VARIANTS="new base"] \
#     [AB_SANITIZERS="memcheck racecheck"] [AB_CASES=scripts/tree_ab_cases.txt] scripts/kernel_variants_ab.sh
# A variant is name=settings, comma-separated: -D... compile-time defines, @VAR=value
# environment settings for its runs, +DIR a folder of files laid over csrc/kernels/ (another
# version of the kernel, in a copy of the sources beside its build; none: the tree as it is).
# AB_FAMILY picks the sources, test and clock switch: tree (tree_build.cu, test_tree_build,
# -DKD_TREE_PHASE_CLOCKS, scripts/tree_clk_cases.txt) or attn (verify_attn*.cu, test_verify_attn,
# -DKD_ATTN_PHASE_CLOCKS, scripts/attn_clk_cases.txt). The TREE_* names of the script's
# first form (tree_variants_ab.sh) are still read.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/o}; mkdir -p "$OUT"
FAMILY=${AB_FAMILY:-tree}
case $FAMILY in
  tree) SOURCES="tree_build.cu"; TEST=test_tree_build; CLK_DEF=-DKD_TREE_PHASE_CLOCKS; CLK_TAG=tree_clk
        CLK_CASES_DEFAULT=scripts/tree_clk_cases.txt; CASES_DEFAULT=scripts/tree_ab_cases.txt ;;
  attn) SOURCES="verify_attn.cu verify_attn_bf16.cu verify_attn_f32.cu"; TEST=test_verify_attn
        CLK_DEF=-DKD_ATTN_PHASE_CLOCKS; CLK_TAG=attn_clk; CLK_CASES_DEFAULT=scripts/attn_clk_cases.txt
        CASES_DEFAULT=scripts/attnab_cases.txt ;;
  *) echo "AB_FAMILY must be tree or attn, got $FAMILY" >&2; exit 2 ;;
esac
ROUNDS=${AB_ROUNDS:-${TREE_AB_ROUNDS:-3}}
CASES=${AB_CASES:-${TREE_AB_CASES:-$CASES_DEFAULT}}
CLK_CASES=${AB_CLK_CASES:-$CLK_CASES_DEFAULT}
CLK_VARIANTS=${AB_CLK_VARIANTS:-${TREE_CLK_VARIANTS:-}}
SANITIZERS=${AB_SANITIZERS:-${TREE_AB_SANITIZERS:-}}
VARIANTS=${AB_VARIANTS:-${TREE_VARIANTS:?name=settings ... (see the header)}}
{ date -u +%FT%TZ; echo "commit ${KDTREE_COMMIT:-?}"; echo "family $FAMILY; variants $VARIANTS"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader; } > "$OUT/env.txt"
python3 -m kdtree_cli build -j 16 bench_kernels "$TEST" > "$OUT/build.log" 2>&1
echo "build: rc=$? $(tail -n 2 "$OUT/build.log" | head -n 1)"
NINJA=$(command -v ninja || python3 -c 'import ninja, os; print(os.path.join(ninja.BIN_DIR, "ninja"))')
declare -A DEFS ENVS DIR OVER CLK
names=()
for spec in $VARIANTS; do
  name=${spec%%=*}; names+=("$name"); DEFS[$name]=""; ENVS[$name]=""; OVER[$name]=""
  IFS=, read -r -a items <<< "${spec#*=}"
  for it in "${items[@]}"; do
    case "$it" in @*) ENVS[$name]+=" ${it#@}" ;; +*) OVER[$name]=$(realpath "${it#+}") ;; ?*) DEFS[$name]+=" $it" ;; esac
  done
  DIR[$name]=build; [ -n "${DEFS[$name]}" ] && DIR[$name]="build-v-$name"
  [ -n "${OVER[$name]}" ] && DIR[$name]="src-v-$name/build"
done
build_copy() {  # dir defines [overlay]: dir/release's sources are dir/../csrc
  if [ -n "${3:-}" ]; then
    rm -rf "$(dirname "$1")" && mkdir -p "$(dirname "$1")" && cp -a csrc "$(dirname "$1")/" && cp "$3"/* "$(dirname "$1")/csrc/kernels/"
    ln -s "$PWD/refs" "$(dirname "$1")/refs"  # the tests' bundles, found beside the sources
  fi
  rm -rf "$1" && cp -a build "$1"
  for f in $SOURCES; do rm -f "$1/release/obj/kernels/$f.o"; done
  env NVCC_APPEND_FLAGS="$2" "$NINJA" -C "$1/release" bin/bench_kernels "bin/$TEST" > "$OUT/${1//\//_}.log" 2>&1
  echo "rc=$?" >> "$OUT/${1//\//_}.log"
}
for name in "${names[@]}"; do
  [ "${DIR[$name]}" != build ] && build_copy "${DIR[$name]}" "${DEFS[$name]}" "${OVER[$name]}" &
done
for name in $CLK_VARIANTS; do
  clk="build-v-$name-clk"; [ -n "${OVER[$name]}" ] && clk="src-v-$name-clk/build"
  CLK[$name]=$clk; build_copy "$clk" "${DEFS[$name]} $CLK_DEF" "${OVER[$name]}" &
done
wait
progs() { echo "env ${ENVS[$1]} ${DIR[$1]}/release/bin"; }  # the variant's programs, its settings first
for name in "${names[@]}"; do
  b="${DIR[$name]}"; [ "$b" != build ] && b="$b: $(tail -n 1 "$OUT/${b//\//_}.log")"
  echo "variant $name (defines:${DEFS[$name]:- none}; env:${ENVS[$name]:- none}) build $b"
  case " ${AB_TESTS:-${names[*]}} " in *" $name "*) ;; *) continue ;; esac
  timeout 180 $(progs "$name")/$TEST > "$OUT/test-$name.log" 2>&1
  echo "  $TEST: rc=$? $(grep -E '^[0-9]+ passed' "$OUT/test-$name.log" | tail -1)"
done
first=${names[0]}
for tool in $SANITIZERS; do
  timeout 300 env ${ENVS[$first]} compute-sanitizer --tool "$tool" --error-exitcode 9 \
    "${DIR[$first]}/release/bin/$TEST" > "$OUT/san-$tool.log" 2>&1
  echo "$tool ($first): rc=$? $(grep -E 'SUMMARY' "$OUT/san-$tool.log" | tail -1); $(grep -E '^[0-9]+ passed' "$OUT/san-$tool.log" | tail -1)"
done
for r in $(seq "$ROUNDS"); do for name in "${names[@]}"; do
  timeout 200 $(progs "$name")/bench_kernels --cases "$CASES" --json "$OUT/$name-$r.json" > "$OUT/$name-$r.log" 2>&1
  echo "round $r $name: rc=$?"; done; done
for name in $CLK_VARIANTS; do
  while read -r -u 3 c; do [ -z "$c" ] && continue
    echo "$c" > "$OUT/clk_case.txt"
    echo "== $name: $c"
    timeout 60 env ${ENVS[$name]} "${CLK[$name]}/release/bin/bench_kernels" --cases "$OUT/clk_case.txt" 2>&1 | grep "$CLK_TAG" | tail -3
  done 3< "$CLK_CASES"
done > "$OUT/clk.txt"
cat "$OUT/clk.txt"
python3 - "$OUT" "$ROUNDS" "${names[@]}" <<'PY'
import json, statistics, sys
from pathlib import Path
out, rounds, names = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
rows = {}
for s in names:
    for r in range(1, rounds + 1):
        path = out / f"{s}-{r}.json"
        if not path.exists(): continue
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            rows.setdefault((rec["case"], names.index(s)), []).append(rec)
print(f"{'case':<52} {'variant':>10} {'us':>8} {'graph us':>9} {'spread':>7} {'differ':>6}  plan")
for (key, i), recs in sorted(rows.items()):
    ms = [x.get("ms", float("nan")) for x in recs]
    g = statistics.median(x.get("graph_ms", float("nan")) for x in recs)
    d = max(x.get("trees_differing_from_heap", -1) for x in recs)  # tree_build only
    plan = " ".join(f"{k}={recs[0][k]}" for k in ("splits", "split_group", "split_keys", "config") if k in recs[0])
    print(f"{key:<52} {names[i]:>10} {statistics.median(ms) * 1e3:8.1f} {g * 1e3:9.1f} {(max(ms) - min(ms)) * 1e3:7.1f} {d:>6}  {plan}")
PY
cd "$OUT" && tar czf logs.tgz --exclude=logs.tgz ./*.log ./*.json ./*.txt 2>/dev/null && rm -f ./*.log ./*.json
