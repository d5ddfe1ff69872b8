#!/bin/bash
# Builds flashmla_bench (stop 41's FlashMLA baseline; off the GPU machine, nvcc 13.0 here, ~2 min
# on 2 cores) from FlashMLA's sources beside harness.cu, as stop 41 did:
#   git -C <FlashMLA clone> archive 9241ae3 csrc | tar x                  # deepseek-ai/FlashMLA
#   mkdir -p csrc/cutlass && git -C <CUTLASS clone> archive 147f5673d0c1c3dcf66f78d677fd647e4a020219 \
#       include tools/util/include | tar x -C csrc/cutlass                # FlashMLA's submodule commit
#   bash build.sh && mkdir -p <repo>/build/flashmla && cp flashmla_bench <repo>/build/flashmla/
# (FlashMLA's own flags from its setup.py, fp16 off; only the sm90 dense decode kernel, its
# combine and its scheduler are compiled.)
set -euo pipefail
cd "$(dirname "$0")"
FLAGS=(-O3 -std=c++20 -DNDEBUG -D_USE_MATH_DEFINES -Wno-deprecated-declarations -DFLASH_MLA_DISABLE_FP16
  -U__CUDA_NO_HALF_OPERATORS__ -U__CUDA_NO_HALF_CONVERSIONS__ -U__CUDA_NO_HALF2_OPERATORS__
  -U__CUDA_NO_BFLOAT16_CONVERSIONS__ --expt-relaxed-constexpr --expt-extended-lambda --use_fast_math
  -gencode arch=compute_90a,code=sm_90a -Icsrc -Icsrc/kerutils/include -Icsrc/sm90
  -Icsrc/cutlass/include -Icsrc/cutlass/tools/util/include)
mkdir -p obj
for f in harness.cu csrc/sm90/decode/dense/instantiations/bf16.cu csrc/smxx/decode/combine/combine.cu \
         csrc/smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu; do
  o=obj/$(echo "$f" | tr / _).o
  nvcc "${FLAGS[@]}" -c "$f" -o "$o" &
done
wait
nvcc -gencode arch=compute_90a,code=sm_90a obj/*.o -o flashmla_bench -L/usr/local/cuda/lib64/stubs -lcuda
