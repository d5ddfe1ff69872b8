"""The native engine's weights on one GPU, by part, from the configs alone.

This mirrors `plan_target_weights` and `plan_drafter_weights` (csrc/engine/weights.cpp):
the same tensors, the same split over N GPUs (docs/engine.md, "Several GPUs": heads of
q_b, kv_b and o_proj; columns of the dense MLP and the shared expert; whole experts;
lm_head rows; everything else replicated, the drafter included), the same storage (bf16 or
float32, routers float32, INT4 experts in the W4A16 kernel's tiles with their scales) and
the same 256-byte alignment of every allocation. tests/plan holds it against the emulated
engine's own memory report and against a count of a torch model's parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from python_engine.errors import KdtreeError
from python_engine.model.config import TargetConfig
from python_engine.model.drafter_config import DrafterConfig

DEVICE_ALIGN = 256  # csrc/engine/device_memory.h kDeviceAlign: every allocation rounds up to it
# The W4A16 kernel's tile (csrc/kernels/moe_gemm_w4a16.cuh): 16 rows x 64 columns a block,
# 128 words of nibbles and 16 of bf16 scales.
W4_TILE_ROWS, W4_TILE_COLS, W4_BLOCK_WORDS = 16, 64, 144
DTYPE_BYTES = {"bfloat16": 2, "float32": 4}

PARTS = ("attention", "dense_mlp", "routed_experts", "shared_experts", "routers", "embedding", "lm_head",
         "norms", "drafter")


def aligned(n: int) -> int:
    return (n + DEVICE_ALIGN - 1) // DEVICE_ALIGN * DEVICE_ALIGN


def int4_expert_bytes(n: int, k: int) -> int:
    """One [n, k] expert matrix in the W4A16 tiles, scales included."""
    tiles = -(-n // W4_TILE_ROWS) * -(-k // W4_TILE_COLS)
    return tiles * W4_BLOCK_WORDS * 4


@dataclass
class WeightParts:
    """Bytes on one GPU by part (PARTS), and the experts one MoE layer holds there."""

    bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PARTS, 0))
    experts_per_layer: int = 0
    expert_bytes: int = 0  # one routed expert, all three projections
    moe_layers: int = 0

    @property
    def total(self) -> int:
        return sum(self.bytes.values())

    def add(self, part: str, n: int) -> None:
        self.bytes[part] += aligned(n)


def check_split(cfg: TargetConfig, world: int) -> None:
    """The engine's split_target: every split dimension divides by the GPU count."""
    dims = [("num_attention_heads", cfg.num_attention_heads), ("vocab_size", cfg.vocab_size)]
    if cfg.first_k_dense_replace > 0:
        dims.append(("intermediate_size", cfg.intermediate_size))
    if cfg.first_k_dense_replace < cfg.num_hidden_layers:
        dims.append(("n_routed_experts", cfg.n_routed_experts))
        if cfg.n_shared_experts:
            dims.append(("moe_intermediate_size * n_shared_experts", cfg.moe_intermediate_size * cfg.n_shared_experts))
    for name, n in dims:
        if n % world:
            raise KdtreeError(f"a model split over {world} GPUs needs {name} ({n}) divisible by {world}")


def target_weights(cfg: TargetConfig, world: int = 1, dtype: str = "bfloat16") -> WeightParts:
    """The target's weights on one of `world` GPUs (every rank holds the same bytes)."""
    if dtype not in DTYPE_BYTES:
        raise KdtreeError(f"dtype {dtype!r}: choose {' or '.join(DTYPE_BYTES)}")
    check_split(cfg, world)
    el, f32 = DTYPE_BYTES[dtype], 4
    H, V, nh = cfg.hidden_size, cfg.vocab_size, cfg.num_attention_heads
    hl = nh // world
    qk, kvb = cfg.qk_head_dim, cfg.qk_nope_head_dim + cfg.v_head_dim
    w = WeightParts()
    w.add("embedding", V * H * el)
    w.add("norms", H * el)
    if not cfg.tie_word_embeddings:
        w.add("lm_head", V // world * H * el)
    int4 = cfg.quantization is not None and dtype == "bfloat16"
    for i in range(cfg.num_hidden_layers):
        w.add("norms", H * el)  # input_layernorm
        w.add("norms", H * el)  # post_attention_layernorm
        latent = (cfg.kv_lora_rank + cfg.qk_rope_head_dim) * H
        if cfg.q_lora_rank is None:
            w.add("attention", (hl * qk * H + latent) * el)  # [q (this rank's heads) | kv_a]
        else:
            w.add("attention", (cfg.q_lora_rank * H + latent) * el)  # [q_a | kv_a], replicated
            w.add("norms", cfg.q_lora_rank * el)
            w.add("attention", hl * qk * cfg.q_lora_rank * el)  # q_b
        w.add("norms", cfg.kv_lora_rank * el)
        w.add("attention", hl * kvb * cfg.kv_lora_rank * el)  # kv_b
        w.add("attention", H * hl * cfg.v_head_dim * el)  # o_proj's input columns
        if not cfg.is_moe_layer(i):
            il = cfg.intermediate_size // world
            w.add("dense_mlp", 2 * il * H * el)
            w.add("dense_mlp", H * il * el)
            continue
        w.moe_layers += 1
        w.add("routers", cfg.n_routed_experts * H * f32)
        w.add("routers", cfg.n_routed_experts * f32)
        local = cfg.n_routed_experts // world
        w.experts_per_layer = local
        I = cfg.moe_intermediate_size
        mats = [(I, H), (I, H), (H, I)]  # gate, up, down: [out, in]
        one = [int4_expert_bytes(n, k) if int4 else n * k * (f32 if cfg.quantization else el) for n, k in mats]
        w.expert_bytes = sum(one)
        for b in one:
            w.add("routed_experts", b * local)
        if cfg.n_shared_experts:
            sl = I * cfg.n_shared_experts // world
            w.add("shared_experts", 2 * sl * H * el)
            w.add("shared_experts", H * sl * el)
    return w


def drafter_weights(d: DrafterConfig, target_layers_features: int | None = None, dtype: str = "bfloat16") -> int:
    """The drafter's weights (every GPU holds all of them): fc, its norms, its layers.
    `target_layers_features`: fc's input width, len(target_layer_ids) x hidden by default."""
    el = DTYPE_BYTES[dtype]
    H, q, kv = d.hidden_size, d.num_attention_heads * d.head_dim, d.num_key_value_heads * d.head_dim
    features = target_layers_features or len(d.target_layer_ids) * H
    total = aligned(H * features * el) + 2 * aligned(H * el)
    for _ in range(d.num_hidden_layers):
        total += 2 * aligned(H * el)
        total += aligned((q + 2 * kv) * H * el)
        total += aligned(H * q * el)
        total += 2 * aligned(d.head_dim * el)
        total += aligned(2 * d.intermediate_size * H * el)
        total += aligned(H * d.intermediate_size * el)
    return total


def drafter_parameters(d: DrafterConfig) -> int:
    """The drafter's parameter count (what its checkpoint stores: no embedding, no lm_head)."""
    H, q, kv = d.hidden_size, d.num_attention_heads * d.head_dim, d.num_key_value_heads * d.head_dim
    per_layer = 2 * H + (q + 2 * kv) * H + H * q + 2 * d.head_dim + 3 * d.intermediate_size * H
    return len(d.target_layer_ids) * H * H + 2 * H + d.num_hidden_layers * per_layer
