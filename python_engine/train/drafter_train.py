"""Training the demo drafter (DFlash block diffusion) on the frozen target.

Data: the target's greedy continuations of train-split prompts (drafter_data). Each step
draws sequences, runs the target for their features at target_layer_ids, draws anchors in
the continuation and trains the drafter to predict the B-1 tokens after each anchor from
[anchor token, mask, ...] plus the features of everything before the anchor, with DFlash's
position weights (early positions count more: an early miss ends the accepted path).

Validation on held-back continuations reports per-depth top-1 accuracy and the chain's
expected acceptance length (1 + leading correct positions), which is what DDTree's chain
(budget B-1, no branching) gets at T = 0 on the target's own text.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from python_engine.train.drafter_data import LayerTaps, greedy_continuations, sample_blocks, target_features
from python_engine.train.drafter_model import DFlashTrainModel, drafter_config_dict, position_weights, save_drafter
from python_engine.train.progress import Progress
from python_engine.train.recipe import Recipe
from python_engine.train.schedule import StepPlan, TimeGuard, lr_at
from python_engine.train.target_model import load_hf_target, read_config
from python_engine.train.target_train import autocast_for
from python_engine.train.tokenizer import EOS_ID, TokenizedCorpus

HISTORY_NAME = "drafter-history.json"


def make_prompts(tokens: TokenizedCorpus, count: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """[count, length] windows of the train split, each starting with EOS (a document start,
    as the demo's prompts do)."""
    stream = torch.from_numpy(tokens.train.astype("int64"))
    starts = torch.randint(0, len(stream) - length, (count,), generator=generator)
    body = stream[starts[:, None] + torch.arange(length - 1)]
    return torch.cat([torch.full((count, 1), EOS_ID, dtype=torch.long), body], dim=1)


@torch.no_grad()
def validate(model, target, taps, val, anchors, blocks, labels, embed, lm_head, weights, device) -> dict:
    model.eval()
    feats = target_features(target, taps, val, device)
    with autocast_for(device):
        logits = model(feats, anchors, blocks, embed, lm_head)
    ce = F.cross_entropy(logits.float().flatten(0, 2), labels.flatten(), reduction="none").view(labels.shape)
    correct = logits.argmax(-1) == labels  # [N, A, B-1]
    leading = correct.int().cumprod(dim=-1).sum(dim=-1).float()  # accepted drafted tokens, chain
    model.train()
    return {
        "loss": float((ce * weights).mean()),  # position-weighted, as the training loss
        "depth_accuracy": [round(float(a), 4) for a in correct.float().mean(dim=(0, 1))],
        "chain_tau_estimate": float(1 + leading.mean()),
    }


def train_drafter(recipe: Recipe, tokens: TokenizedCorpus, target_dir: Path, out_dir: Path, device: torch.device,
                  log=None) -> dict:
    dt, shape = recipe.drafter_training, recipe.drafter
    progress = Progress("drafter", dt.steps, every=max(1, dt.eval_every // 2))
    log = log or progress.say
    g = torch.Generator().manual_seed(dt.seed)
    target = load_hf_target(target_dir, device)
    target.requires_grad_(False)
    target.eval()

    prompts = make_prompts(tokens, dt.gen_prompts, dt.gen_prompt_len, g).to(device)
    log(f"generating {dt.gen_prompts} greedy continuations of {dt.gen_new_tokens} tokens with the target")
    t0 = time.perf_counter()
    seqs = greedy_continuations(target, prompts, dt.gen_new_tokens, dt.gen_batch, progress, dt.gen_time_budget_s)
    gen_seconds = round(time.perf_counter() - t0, 1)
    n_val = max(1, min(64, len(seqs) // 20))
    val, train = seqs[:n_val], seqs[n_val:] if len(seqs) > n_val else seqs
    P, B = dt.gen_prompt_len, shape.block_size
    val_blocks = sample_blocks(val, P, dt.anchors_per_seq, B, torch.Generator().manual_seed(dt.seed + 1))

    taps = LayerTaps(target, shape.target_layer_ids)
    embed = target.model.embed_tokens.weight.detach()
    lm_head = target.lm_head.weight.detach()
    raw = drafter_config_dict(shape, read_config(target_dir))
    model = DFlashTrainModel.from_config_dict(raw, dt.seed).to(device)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    log(f"DFlash drafter: {n_params / 1e6:.2f} M parameters, {shape.num_hidden_layers} layers, block {B}, "
        f"features from target layers {list(shape.target_layer_ids)}; {dt.steps} steps of "
        f"{dt.batch_size}x{dt.anchors_per_seq} blocks")
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": dt.weight_decay}, {"params": rest, "weight_decay": 0.0}],
                            lr=dt.lr, betas=(0.9, 0.95), fused=device.type == "cuda")
    weights = position_weights(B, dt.loss_decay, device)
    plan = StepPlan(planned=dt.steps, total=dt.steps, warmup=dt.warmup_steps)
    guard = TimeGuard(plan, dt.time_budget_s, log=log)
    sync = (lambda: torch.cuda.synchronize()) if device.type == "cuda" else (lambda: None)
    history = {"train": {"step": [], "loss": []}, "val": {"step": [], "loss": [], "chain_tau_estimate": [],
                                                          "depth_accuracy": []}}
    log_every = max(1, dt.eval_every // 4)
    running, since_log, step = torch.zeros((), device=device), 0, 0
    while step < plan.total:
        lr = lr_at(step, plan.total, dt.lr, plan.warmup, dt.min_lr_ratio)
        for group in opt.param_groups:
            group["lr"] = lr
        batch = train[torch.randint(0, len(train), (dt.batch_size,), generator=g).to(device)]
        feats = target_features(target, taps, batch, device)
        anchors, blocks, labels = sample_blocks(batch, P, dt.anchors_per_seq, B, g)
        with autocast_for(device):
            logits = model(feats, anchors, blocks, embed, lm_head)
        ce = F.cross_entropy(logits.float().flatten(0, 2), labels.flatten(), reduction="none").view(labels.shape)
        loss = (ce * weights).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), dt.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        running += loss.detach()
        since_log += 1
        guard.check(step, sync)
        guard.overran(step)  # may end the run at this step (plan.total = step + 1)
        last = step + 1 == plan.total
        if (step + 1) % log_every == 0 or last or step == 0:
            value = float(running) / since_log
            running.zero_()
            since_log = 0
            if not math.isfinite(value):
                raise FloatingPointError(f"drafter training diverged at step {step + 1} (loss {value})")
            history["train"]["step"].append(step + 1)
            history["train"]["loss"].append(value)
        if (step + 1) % dt.eval_every == 0 or last:
            v = validate(model, target, taps, val, *val_blocks, embed, lm_head, weights, device)
            history["val"]["step"].append(step + 1)
            for key in ("loss", "chain_tau_estimate", "depth_accuracy"):
                history["val"][key].append(v[key])
            progress.step(step, plan.total, force=True, loss=history["train"]["loss"][-1], val_loss=v["loss"],
                          chain_tau=v["chain_tau_estimate"], acc1=v["depth_accuracy"][0], lr=lr)
        step += 1
    taps.remove()
    history.update(steps_planned=plan.planned, steps_run=plan.total, time_guard=plan.cut_reason,
                   seconds=round(guard.elapsed(), 1), parameters=n_params,
                   generation_seconds=gen_seconds, continuations=len(seqs), continuation_tokens=len(seqs) * dt.gen_new_tokens)
    save_drafter(model, raw, out_dir)
    (out_dir.parent / HISTORY_NAME).write_text(json.dumps(history, indent=1) + "\n")
    log(f"saved {out_dir} after {plan.total} steps in {history['seconds']} s; "
        f"chain tau estimate {history['val']['chain_tau_estimate'][-1]:.2f}")
    return history
