#!/usr/bin/env bash
# stop 40 lease 5: the review's refactor of verify_attn (the decode kernel's key-tile issue in one
# helper, the wgmma epilogue's two stores as one) on the GPU: test_verify_attn (every config the
# device runs, config 10's pairs, fresh large cases of its own), then under memcheck.
# Usage (repository root, GPU machine): KDTREE_COMMIT=<sha> OUT=/tmp/o bash <this file>
set -u
export PATH=$PATH:/usr/local/cuda/bin
T0=$(date +%s)
{ date -u +%FT%TZ; echo "commit ${KDTREE_COMMIT:-?}"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > "$OUT/env.txt"
python3 -m kdtree_cli build -j 16 test_verify_attn > "$OUT/build.log" 2>&1; echo "build rc=$? at $(( $(date +%s) - T0 )) s"
timeout 200 build/release/bin/test_verify_attn > "$OUT/test.log" 2>&1; echo "test rc=$?"; tail -1 "$OUT/test.log"
timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 build/release/bin/test_verify_attn > "$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "ERROR SUMMARY|passed" "$OUT/memcheck.log" | tail -2
