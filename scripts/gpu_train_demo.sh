#!/usr/bin/env bash
# Train, evaluate and export the demo pair on one GPU, in one command of < 9.5 min.
#
#   bash scripts/gpu_train_demo.sh            # on the GPU box, from the repo root
#
# Needs .demo-data/ (corpus + tokenizer), built on the development machine with
#   kdtree train-demo --stage corpus --stage tokenizer
# and carried along: the GPU box has another Python, hence another standard library.
# Stages checkpoint into .demo-work/, so running this again on the same (warm) machine
# resumes after the last finished stage. Results go to $OUT (default .demo-out/):
#   demo-target.tar.gz, demo-drafter.tar.gz   untar into refs/models/ (the target's holds
#                                              demo-target-int4 too)
#   demo-results.tar.gz   eval.json, summary.md, loss curves, histories: untar into results/demo/
#   summary.md            the evaluation table, also printed at the end
# Extra arguments go to train-demo (e.g. --steps 800 --drafter-steps 600 --force). A CPU
# rehearsal of the whole script (after building /tmp/d with the smoke recipe):
#   DATA=/tmp/d WORK=/tmp/w OUT=/tmp/o DEVICE=cpu RECIPE=smoke bash scripts/gpu_train_demo.sh
#
# The demo recipe's stages take more than one command from scratch (target ~3 min, drafter
# ~5 min, eval ~2 min): run the script twice on the same warm machine (it resumes), or
#   REUSE_TARGET=1 bash scripts/gpu_train_demo.sh
# which starts from the committed target (refs/models/demo-target and its history in
# results/demo/) and runs only drafter, eval and export (~8.5 min); demo-target.tar.gz is
# then not packed (the target is unchanged).
set -euo pipefail
SECONDS=0
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/.demo-out}"
PY="${PYTHON:-python3}"
DATA="${DATA:-.demo-data}"
WORK="${WORK:-.demo-work}"
DEVICE="${DEVICE:-cuda}"
RECIPE="${RECIPE:-demo}"
STAGE="$WORK/export"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_NO_ADVISORY_WARNINGS=1

if [ ! -f "$DATA/tokens.npz" ] || [ ! -f "$DATA/tokenizer.json" ]; then
  echo "error: $DATA/ (corpus + tokenizer) is missing; build it with" >&2
  echo "  kdtree train-demo --stage corpus --stage tokenizer   and carry .demo-data" >&2
  exit 1
fi
if [ "${REUSE_TARGET:-0}" = 1 ] && [ ! -f "$WORK/demo-target/config.json" ]; then
  for f in refs/models/demo-target/config.json results/demo/target-history.json; do
    [ -f "$f" ] || { echo "error: REUSE_TARGET=1 needs $f" >&2; exit 1; }
  done
  if ! cmp -s "$DATA/tokenizer.json" refs/models/demo-target/tokenizer.json; then
    echo "error: $DATA/tokenizer.json is not the committed target's tokenizer" >&2; exit 1
  fi
  echo "== reusing the committed target (refs/models/demo-target)"
  mkdir -p "$WORK"
  cp -r refs/models/demo-target "$WORK/demo-target"
  cp results/demo/target-history.json "$WORK/target-history.json"
  if [ -f results/demo/target-loss.png ]; then cp results/demo/target-loss.png "$WORK/target-loss.png"; fi
fi
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader || true
"$PY" -c 'import sys, torch, transformers; print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__, "cuda", torch.cuda.is_available())'

# Preflight (~30 s): every stage of the tiny smoke recipe on this GPU, from this machine's own
# standard library, so that a GPU-only failure shows before the real run spends its minutes.
if [ "${PREFLIGHT:-1}" = 1 ] && [ ! -f "$WORK/eval.json" ]; then
  echo "== preflight: smoke recipe on $DEVICE"
  rm -rf "$WORK-preflight"
  timeout 120 "$PY" -m kdtree_cli.commands.train_demo --stage all --recipe smoke --device "$DEVICE" \
    --steps 2 --drafter-steps 2 --data-dir "$WORK-preflight/data" --work-dir "$WORK-preflight/work" \
    | tail -n 4 || { echo "preflight failed: fix it before the real run" >&2; exit 1; }
fi

# The stages get what is left of 570 s, minus 25 s to pack whatever finished.
left=$(( 545 - SECONDS ))
echo "== $RECIPE recipe on $DEVICE (${left} s left for the stages)"
status=0
timeout --signal=INT "$left" "$PY" -m kdtree_cli.commands.train_demo --stage all --recipe "$RECIPE" --device "$DEVICE" \
  --data-dir "$DATA" --work-dir "$WORK" --models-dir "$STAGE/models" --results-dir "$STAGE/results" "$@" \
  || status=$?

# Each file that comes back must stay under 16 MiB: one gzipped tar per model folder.
pack() {  # pack NAME DIR...: $OUT/NAME.tar.gz of the given folders' contents
  local name=$1; shift
  tar -czf "$OUT/$name.tar.gz" "$@"
}
if [ -d "$STAGE/models/demo-target" ] && [ -d "$STAGE/models/demo-drafter" ]; then
  [ "${REUSE_TARGET:-0}" = 1 ] || pack demo-target -C "$STAGE/models" demo-target demo-target-int4
  pack demo-drafter -C "$STAGE/models" demo-drafter
  pack demo-results -C "$STAGE/results" .
  cp "$STAGE/results/summary.md" "$OUT/summary.md"
else
  # stopped before export: bring back what finished, to look at or to commit by hand
  if [ "${REUSE_TARGET:-0}" != 1 ] && [ -f "$WORK/demo-target/config.json" ]; then
    pack demo-target -C "$WORK" demo-target
  fi
  [ -f "$WORK/demo-drafter/config.json" ] && pack demo-drafter -C "$WORK" demo-drafter
  (cd "$WORK" && ls *.json *.png *.md 2>/dev/null | tar -czf "$OUT/demo-partial.tar.gz" -T -) || true
  echo "train-demo stopped (status $status) before export; run this script again to resume." >&2
fi
ls -la "$OUT"
exit "$status"
