"""`kdtree bench`: timings on a GPU next to baselines measured in the same run.

moe.py      one Kimi K2.6-shaped MoE layer, INT4 (W4A16) and bf16 grouped GEMMs
            (csrc/bench/bench_moe.cu) next to torch's grouped GEMM and each format's floor
moe_cli.py  `kdtree bench moe` (registered by kdtree_cli/commands/bench.py)

Imports torch only where used; never textual or fabric.
"""
