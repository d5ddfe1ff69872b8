"""`kdtree bench`: timings on a GPU next to baselines measured in the same run.

gpu.py       whether a GPU is there, and the facts recorded with every result
timing.py    CUDA-event timing of torch work (warm-up, medians)
suites.py    the cases: attention, top-K, tree build, accept, ceilings; quick variants
native.py    bench_kernels (csrc/bench): the kdtree kernels and the C++ heap, as JSON lines
baselines.py torch two-GEMM attention, torch top-K + log-softmax, the Python tree reference
report.py    rows with ratios against baselines and ceilings; JSON, Markdown, PNG plots
kernels.py   `kdtree bench kernels`: all of the above for one device
gpu_check.py `kdtree bench all`: build, native tests, sanitizers, kernels, one summary
moe.py       one Kimi K2.6-shaped MoE layer, INT4 (W4A16) and bf16 grouped GEMMs
             (csrc/bench/bench_moe.cu) next to torch's grouped GEMM and each format's floor
moe_cli.py   `kdtree bench moe`
engine.py    `kdtree bench engine`: the engines' decoding throughput on the demo pair
load.py      `kdtree bench load`: checkpoint load throughput and memory accounting
kernel_profile.py  per-kernel times of a native round under Nsight Compute

Imports torch, matplotlib and pynvml only where used; never textual or fabric.
"""
