"""The agree pair's recipe as one frozen config: the random target (agree_target.py: config,
seed, residual gain), the DFlash drafter's shape, its self-distillation on random-token
prompts (the demo's DrafterTraining, CPU-sized) and the evaluation on fresh prompts. Two
presets: `agree` (the shipped pair, refs/models/agree-*; about 20 minutes on one CPU thread)
and `smoke` (a tiny target, seconds, for tests)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from python_engine.errors import KdtreeError
from python_engine.model.synthetic_checkpoint import tiny_config
from python_engine.train.agree_target import AGREE_TARGET_CONFIG, RESIDUAL_GAIN, SEED
from python_engine.train.recipe import DrafterShape, DrafterTraining


@dataclass(frozen=True)
class AgreeEval:
    prompts: int = 16
    prompt_lens: tuple[int, int] = (4, 32)  # each prompt's length drawn from this range (inclusive)
    new_tokens: int = 64
    budgets: tuple[int, ...] = (8, 16, 32, 64)
    seed: int = 2027  # fresh prompts: the training and validation draws use other seeds


@dataclass(frozen=True)
class AgreeRecipe:
    name: str = "agree"
    target_config: dict = field(default_factory=lambda: AGREE_TARGET_CONFIG)
    target_seed: int = SEED
    residual_gain: float = RESIDUAL_GAIN
    drafter: DrafterShape = field(default_factory=lambda: DrafterShape(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=64, intermediate_size=768,
        block_size=8, target_layer_ids=(0, 2, 3), rope_theta=10000.0))
    # gen_* describe the self-distillation data: random-token prompts of gen_prompt_lens
    # (cycled per batch of gen_batch) continued greedily to gen_seq_len tokens; the time
    # budgets (generation, training steps) only ever shorten a stage, loudly.
    training: DrafterTraining = field(default_factory=lambda: DrafterTraining(
        gen_prompts=4096, gen_prompt_lens=(1, 4, 8, 16, 24, 32), gen_seq_len=104, gen_batch=256,
        gen_time_budget_s=300.0, steps=1000, batch_size=32, anchors_per_seq=16, lr=2e-3, min_lr_ratio=0.1,
        warmup_steps=100, weight_decay=0.1, grad_clip=1.0, loss_decay=7.0, eval_every=250, val_prompts=16,
        val_budget=32, time_budget_s=1200.0, seed=4321))
    val_prompt_len: int = 16
    evaluation: AgreeEval = field(default_factory=AgreeEval)

    def to_dict(self) -> dict:
        return asdict(self)


def smoke_agree_recipe() -> AgreeRecipe:
    """Every code path of the agree recipe on a tiny target (seconds on a CPU)."""
    return AgreeRecipe(
        name="smoke",
        target_config=tiny_config(n_group=1, topk_group=1, bos_token_id=0, eos_token_id=0, rope_scaling={
            "type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "beta_fast": 1.0, "beta_slow": 1.0,
            "mscale": 1.0, "mscale_all_dim": 1.0}),
        target_seed=5,
        drafter=DrafterShape(num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                             intermediate_size=64, block_size=4, target_layer_ids=(0, 2)),
        training=DrafterTraining(gen_prompts=32, gen_prompt_lens=(2, 5), gen_seq_len=24, gen_batch=16,
                                 gen_time_budget_s=60.0, steps=4, batch_size=4, anchors_per_seq=4, warmup_steps=1,
                                 eval_every=2, val_prompts=3, val_budget=4, time_budget_s=60.0),
        val_prompt_len=4,
        evaluation=AgreeEval(prompts=2, prompt_lens=(2, 6), new_tokens=10, budgets=(4, 8)),
    )


PRESETS = {"agree": AgreeRecipe, "smoke": smoke_agree_recipe}


def get_agree_recipe(name: str) -> AgreeRecipe:
    try:
        return PRESETS[name]()
    except KeyError:
        raise KdtreeError(f"unknown recipe {name!r}; choose one of {', '.join(PRESETS)}") from None


def with_drafter_steps(r: AgreeRecipe, steps: int | None) -> AgreeRecipe:
    if steps is None:
        return r
    return replace(r, training=replace(r.training, steps=steps,
                                       warmup_steps=min(r.training.warmup_steps, max(1, steps // 10))))
