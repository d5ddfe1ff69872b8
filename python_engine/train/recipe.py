"""The whole demo recipe as one frozen config: model shapes, training and evaluation
settings, seeds. Two presets: `demo` (the shipped pair; target training (~3 min), drafter
data + training (~5 min) and the evaluation (~2 min) take two 10-minute H200 commands, or
one when the committed target is reused: REUSE_TARGET=1 scripts/gpu_train_demo.sh) and
`smoke` (tiny, seconds on a CPU, for tests and for checking the pipeline end to end). Time budgets only ever shorten a stage, loudly (schedule.TimeGuard)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from python_engine.errors import KdtreeError


@dataclass(frozen=True)
class TargetShape:
    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 768  # the dense first layer
    moe_intermediate_size: int = 128  # each routed expert and the shared one
    num_hidden_layers: int = 6
    num_attention_heads: int = 4
    q_lora_rank: int = 128
    kv_lora_rank: int = 64
    qk_nope_head_dim: int = 32
    qk_rope_head_dim: int = 16
    v_head_dim: int = 32
    n_routed_experts: int = 8
    n_shared_experts: int = 1
    num_experts_per_tok: int = 2
    n_group: int = 4
    topk_group: int = 2
    first_k_dense_replace: int = 1
    routed_scaling_factor: float = 2.5
    # YaRN on, as DeepSeek-V3 ships it: trained at seq_len <= original_max, usable to 4x.
    original_max_position_embeddings: int = 512
    rope_factor: float = 4.0
    rope_theta: float = 10000.0


@dataclass(frozen=True)
class DrafterShape:
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    intermediate_size: int = 768
    block_size: int = 16
    target_layer_ids: tuple[int, ...] = (1, 3, 5)
    rope_theta: float = 10000.0


@dataclass(frozen=True)
class TargetTraining:
    steps: int = 2000
    batch_size: int = 128  # sequences per step
    seq_len: int = 512  # batch_size * seq_len = 64k tokens per step
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    bias_update_rate: float = 1e-3  # DeepSeek-V3's auxiliary-loss-free balancing speed
    eval_every: int = 100
    eval_batches: int = 4
    time_budget_s: float = 180.0  # the step count shrinks (loudly) if it would not fit
    seed: int = 1234


@dataclass(frozen=True)
class DrafterTraining:
    # Self-distillation data: greedy continuations of the target from train-split prompts.
    # The first demo run generated 7168 x 256 tokens (45 s, batches of 1024) and the drafter
    # memorised them (budget-64 tau 4.6 on its own sequences, 2.8 on fresh ones), so this
    # makes as many as the time budget allows: batches 4x larger (the target is small, a
    # step costs about the same), shorter sequences that still cover the eval's span
    # (positions up to prompt + 96 + 15), prompt lengths varying as requests do.
    gen_prompts: int = 262144  # an upper bound: the time budget decides
    gen_prompt_lens: tuple[int, ...] = (32, 64, 96, 128)  # cycled, one per generation batch
    gen_seq_len: int = 240  # prompt + continuation
    gen_batch: int = 4096
    gen_time_budget_s: float = 110.0  # whole batches only, stopped (loudly) when the next would not fit
    steps: int = 5000
    batch_size: int = 64  # sequences per step
    anchors_per_seq: int = 16  # blocks drawn per sequence
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    loss_decay: float = 7.0  # DFlash: weight of block position k is exp(-(k-1)/loss_decay)
    eval_every: int = 500  # one validation: 12 s on 2 CPU cores (64 prompts), ~1-2 s on the H200
    # validation: held-out-file prompts shaped like the evaluation's (drafter_validation)
    val_prompts: int = 64
    val_budget: int = 64
    time_budget_s: float = 170.0  # the training steps (the guard's projection); validations come on top
    seed: int = 4321


@dataclass(frozen=True)
class EvalSettings:
    prompts: int = 12
    prompt_len: int = 96
    new_tokens: int = 96
    budgets: tuple[int, ...] = (8, 16, 32, 64, 128, 256)
    t1_budget: int = 64
    ppl_windows: int = 64  # held-out windows of seq_len for perplexity
    seed: int = 99


@dataclass(frozen=True)
class Recipe:
    name: str = "demo"
    vocab_size: int = 4096
    heldout_every: int = 10
    max_files: int | None = None  # corpus size cap (smoke)
    target: TargetShape = field(default_factory=TargetShape)
    drafter: DrafterShape = field(default_factory=DrafterShape)
    target_training: TargetTraining = field(default_factory=TargetTraining)
    drafter_training: DrafterTraining = field(default_factory=DrafterTraining)
    evaluation: EvalSettings = field(default_factory=EvalSettings)

    def to_dict(self) -> dict:
        return asdict(self)

    def with_steps(self, target_steps: int | None, drafter_steps: int | None) -> "Recipe":
        r = self
        if target_steps is not None:
            r = replace(r, target_training=replace(r.target_training, steps=target_steps,
                                                   warmup_steps=min(r.target_training.warmup_steps, max(1, target_steps // 10))))
        if drafter_steps is not None:
            r = replace(r, drafter_training=replace(r.drafter_training, steps=drafter_steps,
                                                    warmup_steps=min(r.drafter_training.warmup_steps, max(1, drafter_steps // 10))))
        return r


def smoke_recipe() -> Recipe:
    """Every code path of the demo recipe, small enough for a CPU test."""
    return Recipe(
        name="smoke",
        vocab_size=384,
        max_files=60,
        target=TargetShape(vocab_size=384, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                           num_hidden_layers=3, num_attention_heads=2, q_lora_rank=32, kv_lora_rank=16,
                           qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, n_routed_experts=4,
                           num_experts_per_tok=2, n_group=2, topk_group=1, original_max_position_embeddings=64),
        drafter=DrafterShape(num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                             intermediate_size=128, block_size=8, target_layer_ids=(0, 2)),
        target_training=TargetTraining(steps=6, batch_size=4, seq_len=64, warmup_steps=2, eval_every=3,
                                       eval_batches=1, time_budget_s=120.0),
        drafter_training=DrafterTraining(gen_prompts=8, gen_prompt_lens=(12, 16), gen_seq_len=48, gen_batch=4,
                                         gen_time_budget_s=60.0, steps=6, batch_size=4, anchors_per_seq=4,
                                         warmup_steps=2, eval_every=3, val_prompts=3, val_budget=8,
                                         time_budget_s=120.0),
        evaluation=EvalSettings(prompts=2, prompt_len=24, new_tokens=12, budgets=(4, 16), t1_budget=8,
                                ppl_windows=4),
    )


PRESETS = {"demo": Recipe, "smoke": smoke_recipe}


def get_recipe(name: str) -> Recipe:
    try:
        return PRESETS[name]()
    except KeyError:
        raise KdtreeError(f"unknown recipe {name!r}; choose one of {', '.join(PRESETS)}") from None


def validate(r: Recipe) -> None:
    """Checks the recipe once, before hours of compute depend on it."""
    t, d = r.target, r.drafter
    if t.vocab_size != r.vocab_size:
        raise KdtreeError(f"recipe {r.name}: target vocab {t.vocab_size} != tokenizer vocab {r.vocab_size}")
    if any(not 0 <= i < t.num_hidden_layers for i in d.target_layer_ids):
        raise KdtreeError(f"recipe {r.name}: drafter target_layer_ids {d.target_layer_ids} outside the target's layers")
    if r.target_training.seq_len > t.original_max_position_embeddings:
        raise KdtreeError(f"recipe {r.name}: seq_len exceeds the YaRN original context")
    dt, ev = r.drafter_training, r.evaluation
    if not dt.gen_prompt_lens or min(dt.gen_prompt_lens) < 1:
        raise KdtreeError(f"recipe {r.name}: gen_prompt_lens must be a non-empty list of lengths >= 1")
    if dt.gen_seq_len - max(dt.gen_prompt_lens) < d.block_size:
        raise KdtreeError(f"recipe {r.name}: gen_seq_len must leave >= block_size tokens after the longest prompt")
    if ev.new_tokens < 2 or dt.val_prompts < 1 or dt.val_budget < 1:
        raise KdtreeError(f"recipe {r.name}: validation needs new_tokens >= 2, val_prompts >= 1, val_budget >= 1")
