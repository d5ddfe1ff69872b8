"""One GPU's memory under the native engine: weights by part, the drafter, the caches for
S slots x C tokens, the workspace, and what is left of the card; the largest context for
each slot count that fits.

Caches are the engine's exactly (csrc/engine/caches.cpp): the target's latent cache holds
576 values (kv_lora 512 + rope 64, the attention kernel's row) per layer, token and slot,
in the compute dtype, for every rank (MLA's cache is per token, not per head); the
drafter's holds K and V of its layers. Each slot's capacity is its tokens plus one
uncommitted tree (EngineLimits::cache_capacity). The workspace is an estimate from the
buffers the engine declares for the largest forward (TargetModel, DrafterModel, VocabHead,
DecodeRound ::declare), the attention kernels' split-KV partials bounded as their plans
bound them.
"""

from __future__ import annotations

from dataclasses import dataclass

from python_engine.decode.memory import largest_fitting
from python_engine.device_profiles import PROFILES
from python_engine.model.config import TargetConfig
from python_engine.model.drafter_config import DrafterConfig
from python_engine.plan.weights import DTYPE_BYTES, WeightParts, aligned, drafter_weights, target_weights

LATENT_ROW = 576  # csrc/kernels/verify_attn.cuh kVerifyQKDim: the cache row, whatever the model's ranks
PREFILL_CHUNK = 256  # the engine's default prompt tokens per forward (model_config.cpp)
ATTN_SPLIT_KEYS = 64  # the smallest key split verify_attn plans: the partials' upper bound per row
ATTN_MAX_SPLITS = 257  # the most splits its plans use (results/h200/bench/all-bench.md: 257 x 512 keys at 128k)
# The drafter attention's split-KV partials (csrc/kernels/drafter_attn.cuh): its plan aims at
# DRAFTER_CTAS_PER_SM CTAs an SM (kDrafterCtasPerSm) and splits only contexts longer than
# DRAFTER_SPLIT_KEYS keys (kDrafterMinSplitKeys); bounded here on the device with the most SMs.
DRAFTER_CTAS_PER_SM = 2
DRAFTER_SPLIT_KEYS = 256
CUBLAS_WORKSPACE = 32 << 20  # csrc/engine/gemm.cpp kCublasWorkspaceBytes
MAX_STOP_IDS = 16  # csrc/kernels/round_ops.cuh kMaxStopIds


@dataclass(frozen=True)
class MemoryPlan:
    """Bytes on one GPU. `limit`: the card's memory (or --gpu-memory-limit), less `reserve`."""

    weights: WeightParts
    drafter: int
    target_cache: int
    drafter_cache: int
    workspace: int
    limit: int
    reserve: int
    slots: int
    context: int
    budget: int

    @property
    def used(self) -> int:
        return self.weights.total + self.drafter + self.target_cache + self.drafter_cache + self.workspace

    @property
    def left(self) -> int:
        return self.limit - self.reserve - self.used

    @property
    def fits(self) -> bool:
        return self.left >= 0


def cache_capacity(context: int, budget: int, block_size: int) -> int:
    """Rows a slot's caches hold: its tokens plus one uncommitted tree or block, plus one."""
    return context + max(budget + 1, block_size) + 1


def cache_bytes(cfg: TargetConfig, d: DrafterConfig | None, slots: int, context: int, budget: int,
                dtype: str = "bfloat16") -> tuple[int, int]:
    """(target latent cache, drafter K/V cache and the slot table) bytes for `slots` slots of
    `context` tokens, as the engine's memory report counts them."""
    el = DTYPE_BYTES[dtype]
    cap = cache_capacity(context, budget, d.block_size if d else 1)
    target = cfg.num_hidden_layers * slots * cap * LATENT_ROW * el
    drafter = slot_table_bytes(slots, context, d.block_size if d else 1)
    if d is not None:
        drafter += 2 * d.num_hidden_layers * slots * cap * d.num_key_value_heads * d.head_dim * el
    return target, drafter


def slot_table_bytes(slots: int, context: int, block_size: int) -> int:
    """The per-slot request state (csrc/engine/caches.cpp SlotTable): counters, the output
    tokens, stop ids, sampling seeds; the engine reports it with the drafter's cache."""
    out_cap = context + block_size + 1
    return (12 * aligned(4 * slots) + aligned(4 * slots * out_cap) + aligned(4 * slots * MAX_STOP_IDS)
            + 2 * aligned(8 * slots) + aligned(4 * slots))


def workspace_bytes(cfg: TargetConfig, d: DrafterConfig | None, world: int, slots: int, context: int, budget: int,
                    dtype: str = "bfloat16") -> int:
    """The engine's workspace for this shape: its declared buffers at the largest forward."""
    el, f32 = DTYPE_BYTES[dtype], 4
    H, V = cfg.hidden_size, cfg.vocab_size
    tree_rows = budget + 1
    rows = max(slots * tree_rows, PREFILL_CHUNK)  # EngineLimits::forward_rows
    heads = cfg.num_attention_heads // world
    q_width = cfg.q_lora_rank if cfg.q_lora_rank else heads * cfg.qk_head_dim
    per_row = (5 * H * el  # x, hn, attention out, ffn out, shared out
               + (q_width + cfg.kv_lora_rank + cfg.qk_rope_head_dim) * el  # the fused projection
               + (heads * cfg.qk_head_dim * el if cfg.q_lora_rank else 0)
               + heads * (2 * 512 + 64 + cfg.v_head_dim) * el  # q_lat, o_lat, q_pe, o
               + 3 * max(cfg.intermediate_size, cfg.moe_intermediate_size * cfg.n_shared_experts) // world * el
               + H * f32 + cfg.n_routed_experts * f32  # float32 hidden for the router, its logits
               + cfg.num_experts_per_tok * (cfg.moe_intermediate_size + H) * el + cfg.num_experts_per_tok * 16
               + V * f32)  # logits
    total = rows * per_row
    if d is not None:
        total += rows * len(d.target_layer_ids) * H * el  # the drafter's features
    cap = cache_capacity(context, budget, d.block_size if d else 1)
    splits = min(ATTN_MAX_SPLITS, -(-cap // ATTN_SPLIT_KEYS))
    total += splits * rows * heads * (512 + 2) * f32  # verify_attn's split partials (o, max, sum)
    if world > 1:  # the vocab head's parts and gather of the whole rows
        total += rows * V // world * f32 * (1 + world)
    if d is not None:
        B, qw, kvw = d.block_size, d.num_attention_heads * d.head_dim, d.num_key_value_heads * d.head_dim
        nb = slots * B
        context_rows = max(rows, nb)
        total += context_rows * (len(d.target_layer_ids) * H + H + 2 * kvw) * el
        total += nb * (2 * H + qw + 2 * kvw + qw + H + 3 * d.intermediate_size) * el
        total += slots * (B - 1) * (H * el + V * f32)
        K = min(budget, V)
        total += slots * (B - 1) * K * 8
        if cap + B > DRAFTER_SPLIT_KEYS:  # its partials: (splits x CTAs) <= the SMs' share + one a group
            sms = max(int(p.sm_count.value) for p in PROFILES.values())
            group_rows = d.num_attention_heads // d.num_key_value_heads * B
            total += (DRAFTER_CTAS_PER_SM * sms + slots * d.num_key_value_heads) * group_rows * (d.head_dim + 2) * f32
    return aligned(total) + CUBLAS_WORKSPACE


def memory_plan(cfg: TargetConfig, d: DrafterConfig | None, *, world: int, slots: int, context: int, budget: int,
                limit: int, reserve: int, dtype: str = "bfloat16") -> MemoryPlan:
    weights = target_weights(cfg, world, dtype)
    drafter = drafter_weights(d, dtype=dtype) if d is not None else 0
    tcache, dcache = cache_bytes(cfg, d, slots, context, budget, dtype)
    ws = workspace_bytes(cfg, d, world, slots, context, budget, dtype)
    return MemoryPlan(weights, drafter, tcache, dcache, ws, limit, reserve, slots, context, budget)


def largest_context(cfg: TargetConfig, d: DrafterConfig | None, *, world: int, slots: int, budget: int, limit: int,
                    reserve: int, dtype: str = "bfloat16", ceiling: int | None = None) -> int:
    """The most tokens per slot that fit with `slots` slots (0: not even one token), at most
    `ceiling` (the model's max_position_embeddings by default)."""
    top = ceiling if ceiling is not None else cfg.max_position_embeddings

    def fits(c: int) -> bool:
        return memory_plan(cfg, d, world=world, slots=slots, context=c, budget=budget, limit=limit,
                           reserve=reserve, dtype=dtype).fits

    return max(0, largest_fitting(fits, 1, top))
