"""Training the demo target: next-token cross-entropy on random windows of the train split,
AdamW with warmup + cosine, bf16 autocast on CUDA (float32 master weights), DeepSeek-V3's
bias-based expert balancing, held-out loss every `eval_every` steps."""

from __future__ import annotations

import json
import math
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from python_engine.train.batches import WindowSampler, fixed_windows
from python_engine.train.moe_balance import ExpertLoadBalancer
from python_engine.train.progress import LossMeter, Progress
from python_engine.train.recipe import Recipe
from python_engine.train.schedule import StepPlan, TimeGuard, device_sync, set_lr
from python_engine.train.target_model import build_target, save_target
from python_engine.train.tokenizer import TokenizedCorpus

HISTORY_NAME = "target-history.json"


def autocast_for(device: torch.device):
    """bf16 autocast on CUDA; plain float32 on CPU (CPU bf16 is slower and only for smoke)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return nullcontext()


def param_groups(model, weight_decay: float) -> list[dict]:
    """Decay matrices (and the 3D expert stacks); not norms, the router's bias or embeddings."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.dim() >= 2 and "embed_tokens" not in name else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def lm_loss(model, inputs: torch.Tensor, labels: torch.Tensor, device: torch.device) -> torch.Tensor:
    with autocast_for(device):
        logits = model(input_ids=inputs, use_cache=False).logits
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))


@torch.no_grad()
def heldout_loss(model, windows: np.ndarray, batch: int, device: torch.device) -> float:
    """Mean next-token loss over fixed held-out windows [n, seq_len + 1]."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(windows), batch):
        w = torch.from_numpy(windows[i : i + batch]).to(device)
        loss = lm_loss(model, w[:, :-1], w[:, 1:], device)
        total += float(loss) * w[:, 1:].numel()
        count += w[:, 1:].numel()
    model.train(was_training)
    return total / count


def train_target(recipe: Recipe, tokens: TokenizedCorpus, tokenizer_dir: Path, out_dir: Path,
                 device: torch.device, experts_implementation: str = "eager", log=None) -> dict:
    """Train, save the HF checkpoint to out_dir, return the history (also written beside it)."""
    tt = recipe.target_training
    progress = Progress("target", tt.steps, every=max(1, tt.eval_every // 2))
    log = log or progress.say
    torch.manual_seed(tt.seed)
    model = build_target(recipe.target, tt.seed, experts_implementation).to(device)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    log(f"DeepseekV3ForCausalLM: {n_params / 1e6:.2f} M parameters, experts={experts_implementation}, "
        f"{tt.batch_size}x{tt.seq_len} tokens/step, {tt.steps} steps on {device}")
    fused = device.type == "cuda"
    opt = torch.optim.AdamW(param_groups(model, tt.weight_decay), lr=tt.lr, betas=(0.9, 0.95), eps=1e-8,
                            fused=fused)
    balancer = ExpertLoadBalancer(model, tt.bias_update_rate)
    sampler = WindowSampler(tokens.train, tt.seq_len, tt.batch_size, tt.seed, device)
    eval_windows = fixed_windows(tokens.heldout, tt.seq_len, tt.eval_batches * tt.batch_size, tt.seed + 1)
    plan = StepPlan(planned=tt.steps, total=tt.steps, warmup=tt.warmup_steps)
    guard = TimeGuard(plan, tt.time_budget_s, log=log)
    sync = device_sync(device)
    history = {"train": {"step": [], "loss": []}, "heldout": {"step": [], "loss": []}, "imbalance": []}

    meter = LossMeter("target", device, tt.eval_every // 4, history["train"])
    step = 0
    while step < plan.total:
        lr = set_lr(opt, step, plan, tt.lr, tt.min_lr_ratio)
        inputs, labels = sampler.next()
        loss = lm_loss(model, inputs, labels, device)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tt.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        imbalance = balancer.step()
        meter.add(loss)
        guard.check(step, sync)
        guard.overran(step)  # may end the run at this step (plan.total = step + 1)
        last = step + 1 == plan.total
        if meter.log_if_due(step, last):
            history["imbalance"].append(1.0 if imbalance is None else float(imbalance))
        if (step + 1) % tt.eval_every == 0 or last:
            h = heldout_loss(model, eval_windows, tt.batch_size, device)
            history["heldout"]["step"].append(step + 1)
            history["heldout"]["loss"].append(h)
            progress.step(step, plan.total, force=True, loss=history["train"]["loss"][-1], heldout=h,
                          ppl=math.exp(h), lr=lr, imbalance=history["imbalance"][-1])
        step += 1
    balancer.remove()
    history.update(steps_planned=plan.planned, steps_run=plan.total, time_guard=plan.cut_reason,
                   seconds=round(guard.elapsed(), 1), parameters=n_params,
                   tokens_seen=plan.total * tt.batch_size * tt.seq_len)
    save_target(model, out_dir, tokenizer_dir)
    (out_dir.parent / HISTORY_NAME).write_text(json.dumps(history, indent=1) + "\n")
    log(f"saved {out_dir} after {plan.total} steps in {history['seconds']} s; "
        f"held-out loss {history['heldout']['loss'][-1]:.3f}")
    return history
