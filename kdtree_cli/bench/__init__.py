"""`kdtree bench`: kernel timings next to baselines measured in the same run.

gpu.py       whether a GPU is there, and the facts recorded with every result
timing.py    CUDA-event timing of torch work (warm-up, medians)
suites.py    the cases: attention, top-K, tree build, accept, ceilings; quick variants
native.py    bench_kernels (csrc/bench): the kdtree kernels and the C++ heap, as JSON lines
baselines.py torch two-GEMM attention, torch top-K + log-softmax, the Python tree reference
report.py    rows with ratios against baselines and ceilings; JSON, Markdown, PNG plots
kernels.py   `kdtree bench kernels`: all of the above for one device
gpu_check.py `kdtree bench all`: build, native tests, sanitizers, kernels, one summary

Imports torch, matplotlib and pynvml only where used; never textual or fabric.
"""
