"""Training the demo drafter (DFlash block diffusion) on the frozen target.

Data: the target's greedy continuations of train-split prompts (drafter_data), as many as
the generation time budget allows (the drafter overfits a small set: the first demo run's
1.8 M continuation tokens gave a budget-64 tau of 4.6 on sequences it trained on and 2.8 on
fresh ones). Each step draws sequences, runs the target for their features at
target_layer_ids, draws anchors in the continuations and trains the drafter to predict the
B-1 tokens after each anchor from [anchor token, mask, ...] plus the features of everything
before the anchor, with DFlash's position weights (early positions count more: an early
miss ends the accepted path).

Validation (drafter_validation) runs on held-out-file prompts shaped like the evaluation's
and reports the engine's own T = 0 tau there (chain and DDTree at val_budget); the weights
of the evaluation with the best DDTree tau are the ones saved.

The loop itself (fit_drafter) is shared with the agree pair (agree_pair.py), which feeds it
features precomputed on a CPU instead of running the target every step.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from python_engine.train.drafter_data import LayerTaps, distill_sequences, sample_blocks, target_features
from python_engine.train.drafter_model import DFlashTrainModel, demo_drafter_config, position_weights, save_drafter
from python_engine.train.drafter_validation import ValidationSet, build_validation_set, validate
from python_engine.train.evaluate import heldout_prompts
from python_engine.train.progress import LossMeter, Progress
from python_engine.train.recipe import DrafterTraining, Recipe
from python_engine.train.schedule import StepPlan, TimeGuard, device_sync, set_lr
from python_engine.train.target_model import load_hf_target, read_config
from python_engine.train.target_train import autocast_for
from python_engine.train.tokenizer import TokenizedCorpus

HISTORY_NAME = "drafter-history.json"
VAL_KEYS = ("loss", "chain_tau", "tau_budget", "chain_tau_uniform", "chain_acc1", "depth_accuracy")


def train_drafter(recipe: Recipe, tokens: TokenizedCorpus, target_dir: Path, out_dir: Path, device: torch.device,
                  log=None) -> dict:
    dt, shape, ev = recipe.drafter_training, recipe.drafter, recipe.evaluation
    progress = Progress("drafter", dt.steps, every=max(1, dt.eval_every // 2))
    log = log or progress.say
    g = torch.Generator().manual_seed(dt.seed)
    target = load_hf_target(target_dir, device)
    target.requires_grad_(False)
    target.eval()
    taps = LayerTaps(target, shape.target_layer_ids)
    B = shape.block_size

    val_prompts = torch.tensor(heldout_prompts(tokens, dt.val_prompts, ev.prompt_len, dt.seed + 1), device=device)
    val = build_validation_set(target, taps, val_prompts, ev.new_tokens, B, progress)
    log(f"validation: {len(val.seqs)} held-out-file prompts of {ev.prompt_len} tokens, {ev.new_tokens} new tokens "
        f"each (the evaluation's shape); tau there is the engine's, budget {dt.val_budget} and chain")
    log(f"generating up to {dt.gen_prompts} greedy continuations to {dt.gen_seq_len} tokens (prompt lengths "
        f"{list(dt.gen_prompt_lens)}) with the target, {dt.gen_time_budget_s:.0f} s budget")
    t0 = time.perf_counter()
    seqs, prompt_lens = distill_sequences(target, tokens.train, dt.gen_prompt_lens, dt.gen_seq_len, dt.gen_prompts,
                                          dt.gen_batch, g, device, progress, dt.gen_time_budget_s)
    gen_seconds = round(time.perf_counter() - t0, 1)
    continuation_tokens = int((dt.gen_seq_len - prompt_lens).sum())
    log(f"{len(seqs)} continuations, {continuation_tokens / 1e6:.2f} M continuation tokens in {gen_seconds} s")

    embed = target.model.embed_tokens.weight.detach()
    lm_head = target.lm_head.weight.detach()
    raw = demo_drafter_config(shape, read_config(target_dir))
    model, history = fit_drafter(raw, dt, seqs, prompt_lens,
                                 lambda rows, batch: target_features(target, taps, batch, device),
                                 val, embed, lm_head, device, g, progress, log)
    taps.remove()
    history.update(generation_seconds=gen_seconds, continuations=len(seqs), continuation_tokens=continuation_tokens)
    save_drafter(model, raw, out_dir)
    (out_dir.parent / HISTORY_NAME).write_text(json.dumps(history, indent=1) + "\n")
    sv = history["saved_val"]
    log(f"saved {out_dir} (step {history['saved_step']} of {history['steps_run']}, {history['seconds']} s); on "
        f"{len(val.seqs)} held-out prompts the engine's T=0 tau is {sv['tau_budget']:.3f} at budget "
        f"{dt.val_budget}, chain {sv['chain_tau']:.3f} (per-anchor chain mean {sv['chain_tau_uniform']:.2f})")
    return history


def fit_drafter(raw: dict, dt: DrafterTraining, seqs: torch.Tensor, prompt_lens: torch.Tensor,
                features_of: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], val: ValidationSet,
                embed: torch.Tensor, lm_head: torch.Tensor, device: torch.device, g: torch.Generator,
                progress: Progress, log) -> tuple[DFlashTrainModel, dict]:
    """Train a drafter of config `raw` on self-distilled sequences [n, S] (prompt lengths
    [n]); features_of(rows, batch) gives the target features [len(rows), >= S - 1, F] of
    seqs[rows] (= batch), computed per step (the demo, on a GPU) or looked up (the agree
    pair, precomputed on a CPU); g draws the rows and anchors. Returns the model holding the
    weights of the best validation, and the history (training loss, validations, steps)."""
    B = raw["block_size"]
    model = DFlashTrainModel.from_config_dict(raw, dt.seed).to(device)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    log(f"DFlash drafter: {n_params / 1e6:.2f} M parameters, {raw['num_hidden_layers']} layers, block {B}, "
        f"features from target layers {raw['dflash_config']['target_layer_ids']}; {dt.steps} steps of "
        f"{dt.batch_size}x{dt.anchors_per_seq} blocks")
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": dt.weight_decay}, {"params": rest, "weight_decay": 0.0}],
                            lr=dt.lr, betas=(0.9, 0.95), fused=device.type == "cuda")
    weights = position_weights(B, dt.loss_decay, device)
    plan = StepPlan(planned=dt.steps, total=dt.steps, warmup=dt.warmup_steps)
    guard = TimeGuard(plan, dt.time_budget_s, log=log)
    sync = device_sync(device)
    history = {"train": {"step": [], "loss": []}, "val": {"step": [], **{k: [] for k in VAL_KEYS}}}
    best = {"tau_budget": -1.0, "step": 0, "state": None}
    meter = LossMeter("drafter", device, dt.eval_every // 4, history["train"])
    step = 0
    while step < plan.total:
        lr = set_lr(opt, step, plan, dt.lr, dt.min_lr_ratio)
        rows = torch.randint(0, len(seqs), (dt.batch_size,), generator=g)
        batch = seqs[rows.to(device)]
        feats = features_of(rows, batch)
        anchors, blocks, labels = sample_blocks(batch, prompt_lens[rows], dt.anchors_per_seq, B, g)
        with autocast_for(device):
            logits = model(feats, anchors, blocks, embed, lm_head)
        ce = F.cross_entropy(logits.float().flatten(0, 2), labels.flatten(), reduction="none").view(labels.shape)
        loss = (ce * weights).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), dt.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        meter.add(loss)
        guard.check(step, sync)
        guard.overran(step)  # may end the run at this step (plan.total = step + 1)
        last = step + 1 == plan.total
        meter.log_if_due(step, last)
        if (step + 1) % dt.eval_every == 0 or last:
            v = validate(model, val, embed, lm_head, weights, dt.val_budget)
            history["val"]["step"].append(step + 1)
            for key in VAL_KEYS:
                history["val"][key].append(v[key])
            if v["tau_budget"] > best["tau_budget"]:
                best.update(tau_budget=v["tau_budget"], step=step + 1,
                            state={k: t.detach().clone() for k, t in model.state_dict().items()})
            progress.step(step, plan.total, force=True, loss=history["train"]["loss"][-1], val_loss=v["loss"],
                          tau=v["tau_budget"], chain_tau=v["chain_tau"], chain_acc1=v["chain_acc1"],
                          uniform=v["chain_tau_uniform"], lr=lr)
        step += 1
    if best["state"] is not None and best["step"] != plan.total:
        model.load_state_dict(best["state"])
        log(f"keeping the weights of step {best['step']} (validation tau {best['tau_budget']:.3f}, "
            f"last {history['val']['tau_budget'][-1]:.3f})")
    at = history["val"]["step"].index(best["step"])
    history.update(steps_planned=plan.planned, steps_run=plan.total, time_guard=plan.cut_reason,
                   seconds=round(guard.elapsed(), 1), parameters=n_params, val_budget=dt.val_budget,
                   val_prompts=len(val.seqs), saved_step=best["step"],
                   saved_val={k: history["val"][k][at] for k in VAL_KEYS})
    return model, history
