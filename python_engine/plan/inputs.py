"""The cost model's measured inputs, each with the file and commit it was read from.

These are the figures of results/ that `kdtree plan` projects from; a figure that moves
there should move here with its new file and commit. Everything else the model uses is a
spec (python_engine/device_profiles.py) or an assumption stated where it is used.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    file: str
    commit: str
    what: str

    def cite(self) -> str:
        return f"{self.file} (commit {self.commit}): {self.what}"


KERNELS = Source("results/h200/bench/all-bench.md", "7508c8f", "kdtree bench all on an H200")
MOE = Source("results/h200/bench/moe.md", "c0009b35", "one Kimi-shaped MoE layer, INT4, random routing, H200")
COLLECTIVES = Source("results/h200x2/gpus/collectives.md", "d2fb0ad", "NCCL collectives, 2 H200s over NVLink")
ENGINE_SPLIT = Source("results/h200x2/gpus/gpus.md", "8fb86b5", "the engine split over 2 H200s")
ENGINE_DEMO = Source("results/h200/engine/engine-bfloat16.md", "5295f47", "kdtree bench engine, demo pair, H200")
NCCL_TUNING = Source("NVIDIA/nccl src/graph/tuning.cc", "01afd20a", "NCCL's latency model: hwLat, PCI, ring")

# H200 device copy bandwidth (bytes read + written per second), all-bench.md "Ceilings".
H200_COPY_BANDWIDTH = 4266e9
# cuBLAS bf16 GEMM on the H200, all-bench.md "Ceilings": 8192^3.
H200_GEMM_FLOPS = 787e12

# verify_attn bf16, batch 1, on the H200 (all-bench.md): (heads, rows, prefix) -> us, and
# whether that shape's floor is memory or compute (the table's floor column).
H200_VERIFY_ATTN_US: dict[tuple[int, int, int], tuple[float, str]] = {
    (8, 1, 1024): (13.8, "memory"), (8, 1, 8192): (15.2, "memory"), (8, 1, 32768): (24.3, "memory"),
    (8, 1, 131072): (55.6, "memory"),
    (8, 16, 1024): (16.1, "compute"), (8, 16, 8192): (25.1, "compute"), (8, 16, 32768): (40.5, "compute"),
    (8, 16, 131072): (112.4, "compute"),
    (8, 64, 1024): (18.8, "compute"), (8, 64, 8192): (35.2, "compute"), (8, 64, 32768): (89.6, "compute"),
    (8, 64, 131072): (287.2, "compute"),
    (8, 256, 1024): (27.1, "compute"), (8, 256, 8192): (79.6, "compute"), (8, 256, 32768): (253.9, "compute"),
    (8, 256, 131072): (902.1, "compute"),
    (64, 1, 1024): (16.3, "compute"), (64, 1, 8192): (23.0, "compute"), (64, 1, 32768): (35.1, "compute"),
    (64, 1, 131072): (82.8, "compute"),
    (64, 16, 1024): (23.3, "compute"), (64, 16, 8192): (53.3, "compute"), (64, 16, 32768): (153.2, "compute"),
    (64, 16, 131072): (510.5, "compute"),
    (64, 64, 1024): (36.6, "compute"), (64, 64, 8192): (142.2, "compute"), (64, 64, 32768): (468.2, "compute"),
    (64, 64, 131072): (1747.0, "compute"),
    (64, 256, 1024): (105.2, "compute"), (64, 256, 8192): (507.5, "compute"), (64, 256, 32768): (1790.0, "compute"),
    (64, 256, 131072): (7582.0, "compute"),
}

# The W4A16 MoE layer's time over its byte floor (moe.md "INT4/floor"), by tokens in the layer.
H200_INT4_OVER_FLOOR: dict[int, float] = {1: 1.25, 8: 1.06, 16: 1.04, 64: 1.02, 128: 1.05}

# NCCL all-reduce of rows x 7168 bf16 on 2 H200s (collectives.md): rows -> us a call.
H200X2_ALLREDUCE_US: dict[int, float] = {1: 45.5, 17: 45.6, 65: 47.4, 264: 47.6}
# NCCL all-gather of a few kB (collectives.md: 1 x 81920 float32, 0.33 MB a rank, 39.9 us).
H200X2_SMALL_GATHER_US = 39.9
# Inside the engine, one request at budget 64 on 2 H200s: 8 collectives in 0.992 ms (gpus.md).
H200X2_ENGINE_COLLECTIVE_US = 992.0 / 8

# NCCL's own per-hop latency for a ring over PCI (tuning.cc hwLat[PCI][Ring]): LL, Simple,
# and the share of the link's bandwidth each protocol gets in an all-reduce (LL: a quarter).
NCCL_PCI_RING_HOP_US = {"LL": 1.0, "Simple": 5.7}
NCCL_RING_BANDWIDTH_SHARE = {"LL": 0.25, "Simple": 1.0}

# The round's work besides the forwards, per round, H200, demo pair, budget 16 (engine-bfloat16.md):
# tree build (top-K + tree_build) 41.4 us, commit 23.5 us, host 22.5 us.
H200_ROUND_MACHINERY_US = 41.4 + 23.5 + 22.5

# The demo pair's tau by budget on the H200 (engine-bfloat16.json, commit 5295f47).
DEMO_TAU_BY_BUDGET: dict[int, float] = {8: 3.188, 16: 3.731, 32: 4.086, 64: 4.310}

# The engine's time a layer when the bytes are few: the demo pair's native AR on the H200,
# 1732.5 tokens/s over its 6 layers (engine-bfloat16.md), kernel latencies, not bytes.
H200_DEMO_AR_TOKENS_PER_S = 1732.5
DEMO_TARGET_LAYERS = 6
H200_LAYER_FLOOR_US = 1e6 / H200_DEMO_AR_TOKENS_PER_S / DEMO_TARGET_LAYERS
