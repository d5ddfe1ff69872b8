#!/usr/bin/env bash
# One lease, several variants of tree_build (issue 13), timed in one process order: one full
# build of bench_kernels and test_tree_build, then per variant with compile-time defines a copy
# of that build with only tree_build.cu recompiled under them (NVCC_APPEND_FLAGS) and relinked,
# so a variant costs one file's compile, not a build; variants with run-time settings only
# (KD_TREE_SEARCH=sweep, say) use the main build. Per variant: the GPU tree test; the cases of
# TREE_AB_CASES timed with each variant in turn, TREE_AB_ROUNDS times; phase clocks
# (-DKD_TREE_PHASE_CLOCKS on top, its own copy) for the variants in TREE_CLK_VARIANTS;
# compute-sanitizer on the first variant's test for the tools in TREE_AB_SANITIZERS.
# Prints a table last (per case and variant: the median of the rounds' medians, us); logs and
# JSON in $OUT/logs.tgz.
# Usage (repository root, GPU machine):
#   OUT=/tmp/o TREE_VARIANTS="new= s2=-DKD_ONEPASS_SYNC_DEPTH=2 old=+ab/old sweep=@KD_TREE_SEARCH=sweep" \
#     [TREE_AB_ROUNDS=3] [TREE_CLK_VARIANTS="new base"] [TREE_AB_SANITIZERS="memcheck racecheck"] \
#     [TREE_AB_CASES=scripts/tree_ab_cases.txt] scripts/tree_variants_ab.sh
# A variant is name=settings, comma-separated: -D... compile-time defines, @VAR=value
# environment settings for its runs, +DIR a folder of files laid over csrc/kernels/ (another
# version of the search, in a copy of the sources beside its build; none: the tree as it is).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/o}; mkdir -p "$OUT"
ROUNDS=${TREE_AB_ROUNDS:-3}
CASES=${TREE_AB_CASES:-scripts/tree_ab_cases.txt}
VARIANTS=${TREE_VARIANTS:?name=settings ... (see the header)}
{ date -u +%FT%TZ; echo "commit ${KDTREE_COMMIT:-?}"; echo "variants $VARIANTS"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader; } > "$OUT/env.txt"
python3 -m kdtree_cli build -j 16 bench_kernels test_tree_build > "$OUT/build.log" 2>&1
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
  rm -rf "$1" && cp -a build "$1" && rm -f "$1/release/obj/kernels/tree_build.cu.o"
  env NVCC_APPEND_FLAGS="$2" "$NINJA" -C "$1/release" bin/bench_kernels bin/test_tree_build > "$OUT/${1//\//_}.log" 2>&1
  echo "rc=$?" >> "$OUT/${1//\//_}.log"
}
for name in "${names[@]}"; do
  [ "${DIR[$name]}" != build ] && build_copy "${DIR[$name]}" "${DEFS[$name]}" "${OVER[$name]}" &
done
for name in ${TREE_CLK_VARIANTS:-}; do
  clk="build-v-$name-clk"; [ -n "${OVER[$name]}" ] && clk="src-v-$name-clk/build"
  CLK[$name]=$clk; build_copy "$clk" "${DEFS[$name]} -DKD_TREE_PHASE_CLOCKS" "${OVER[$name]}" &
done
wait
progs() { echo "env ${ENVS[$1]} ${DIR[$1]}/release/bin"; }  # the variant's programs, its settings first
for name in "${names[@]}"; do
  b="${DIR[$name]}"; [ "$b" != build ] && b="$b: $(tail -n 1 "$OUT/${b//\//_}.log")"
  echo "variant $name (defines:${DEFS[$name]:- none}; env:${ENVS[$name]:- none}) build $b"
  timeout 180 $(progs "$name")/test_tree_build > "$OUT/test-$name.log" 2>&1
  echo "  test_tree_build: rc=$? $(grep -E '^[0-9]+ passed' "$OUT/test-$name.log" | tail -1)"
done
first=${names[0]}
for tool in ${TREE_AB_SANITIZERS:-}; do
  timeout 300 env ${ENVS[$first]} compute-sanitizer --tool "$tool" --error-exitcode 9 \
    "${DIR[$first]}/release/bin/test_tree_build" > "$OUT/san-$tool.log" 2>&1
  echo "$tool ($first): rc=$? $(grep -E 'SUMMARY' "$OUT/san-$tool.log" | tail -1); $(grep -E '^[0-9]+ passed' "$OUT/san-$tool.log" | tail -1)"
done
for r in $(seq "$ROUNDS"); do for name in "${names[@]}"; do
  timeout 200 $(progs "$name")/bench_kernels --cases "$CASES" --json "$OUT/$name-$r.json" > "$OUT/$name-$r.log" 2>&1
  echo "round $r $name: rc=$?"; done; done
for name in ${TREE_CLK_VARIANTS:-}; do
  while read -r -u 3 c; do [ -z "$c" ] && continue
    echo "$c" > "$OUT/clk_case.txt"
    echo "== $name: $c"
    timeout 60 env ${ENVS[$name]} "${CLK[$name]}/release/bin/bench_kernels" --cases "$OUT/clk_case.txt" 2>&1 | grep tree_clk | tail -3
  done 3< scripts/tree_clk_cases.txt
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
print(f"{'case':<52} {'variant':>10} {'us':>8} {'graph us':>9} {'spread':>7} {'differ':>6}")
for (key, i), recs in sorted(rows.items()):
    ms = [x.get("ms", float("nan")) for x in recs]
    g = statistics.median(x.get("graph_ms", float("nan")) for x in recs)
    d = max(x.get("trees_differing_from_heap", -1) for x in recs)
    print(f"{key:<52} {names[i]:>10} {statistics.median(ms) * 1e3:8.1f} {g * 1e3:9.1f} {(max(ms) - min(ms)) * 1e3:7.1f} {d:>6}")
PY
cd "$OUT" && tar czf logs.tgz --exclude=logs.tgz ./*.log ./*.json ./*.txt 2>/dev/null && rm -f ./*.log ./*.json
