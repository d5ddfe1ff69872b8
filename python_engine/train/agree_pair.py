"""The agree pair, end to end on a CPU (`kdtree train-agree`): a random Kimi-style target
(agree_target.py) and a DFlash drafter self-distilled on it until DDTree accepts long paths,
for the checks that need a real drafter that agrees with a random target (DDTree == AR on
the native engine with tau > 2).

Stages, all from the recipe's fixed seeds: write the target; generate the validation set
and the self-distillation data (agree_data.py, batched on the reference engine); train the
drafter with the demo's loop (drafter_train.fit_drafter) on the precomputed features; save
it; check the shipping limits; evaluate with the reference engine on fresh prompts
(agree_eval.py); write eval.json, summary.md and the drafter's history.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from python_engine.train.agree_recipe import AgreeRecipe

TARGET_NAME, DRAFTER_NAME = "agree-target", "agree-drafter"


def train_agree_pair(recipe: AgreeRecipe, models_dir: Path, results_dir: Path, provenance: dict,
                     say=print) -> dict:
    """Write models_dir/{agree-target, agree-drafter} and results_dir/{eval.json, summary.md,
    drafter-history.json}; returns the eval dict. `provenance` (command, commit, date,
    machine) is recorded as given."""
    from python_engine.model.target_loader import load_target
    from python_engine.train.agree_data import distill_random, validation_set
    from python_engine.train.agree_eval import evaluate_pair
    from python_engine.train.agree_target import write_agree_target
    from python_engine.train.drafter_model import demo_drafter_config, save_drafter
    from python_engine.train.drafter_train import fit_drafter
    from python_engine.train.export import check_pair_sizes, pair_sizes
    from python_engine.train.progress import Progress

    t_start = time.perf_counter()
    models_dir, results_dir = Path(models_dir), Path(results_dir)
    target_dir, drafter_dir = models_dir / TARGET_NAME, models_dir / DRAFTER_NAME
    dt, shape = recipe.training, recipe.drafter
    progress = Progress("agree", dt.steps, every=max(1, dt.eval_every // 2))
    log = say if say is not print else progress.say

    write_agree_target(target_dir, recipe.target_config, recipe.target_seed, recipe.residual_gain)
    target = load_target(target_dir, device="cpu", dtype=torch.float32)
    log(f"target: {target_dir} (seed {recipe.target_seed}, residual gain {recipe.residual_gain})")
    ids = tuple(shape.target_layer_ids)
    val = validation_set(target, ids, dt.val_prompts, recipe.val_prompt_len, recipe.evaluation.new_tokens,
                         shape.block_size, torch.Generator().manual_seed(dt.seed + 1))
    g = torch.Generator().manual_seed(dt.seed)
    t0 = time.perf_counter()
    seqs, prompt_lens, feats = distill_random(target, ids, dt.gen_prompt_lens, dt.gen_seq_len, dt.gen_prompts,
                                              dt.gen_batch, g, progress, dt.gen_time_budget_s)
    gen_seconds = round(time.perf_counter() - t0, 1)
    continuation_tokens = int((dt.gen_seq_len - prompt_lens).sum())
    log(f"{len(seqs)} continuations, {continuation_tokens} continuation tokens in {gen_seconds} s")

    raw = demo_drafter_config(shape, recipe.target_config)
    model, history = fit_drafter(raw, dt, seqs, prompt_lens, lambda rows, batch: feats[rows], val,
                                 target.w.embed, target.w.lm_head, torch.device("cpu"), g, progress, log)
    history.update(generation_seconds=gen_seconds, continuations=len(seqs), continuation_tokens=continuation_tokens)
    save_drafter(model, raw, drafter_dir)
    total_bytes = check_pair_sizes(models_dir, TARGET_NAME, DRAFTER_NAME)
    log(f"drafter: {drafter_dir}; the pair takes {total_bytes / 2**20:.2f} MiB")

    result = evaluate_pair(target_dir, drafter_dir, recipe.evaluation, Progress("eval", 1))
    result.update(
        recipe=recipe.to_dict(),
        drafter_training={k: v for k, v in history.items() if k not in ("train", "val")},
        files={name: size for name, size in pair_sizes(models_dir, TARGET_NAME, DRAFTER_NAME).items()},
        pair_bytes=total_bytes,
        total_seconds=round(time.perf_counter() - t_start, 1),
        **provenance,
    )
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / "drafter-history.json").write_text(json.dumps(history, indent=1) + "\n")
    (results_dir / "eval.json").write_text(json.dumps(result, indent=1) + "\n")
    (results_dir / "summary.md").write_text(summary_markdown(result))
    return result


def guards_note(r: dict) -> str:
    """What the time guards did in this run, for the summary."""
    d, planned = r["drafter_training"], r["recipe"]["training"]["gen_prompts"]
    notes = []
    if d["continuations"] < planned:
        notes.append(f"generation stopped after {d['continuations']} of {planned} continuations")
    if d.get("time_guard"):
        notes.append(f"training: {d['time_guard']}")
    return "; ".join(notes) + "." if notes else "neither did in this run."


def summary_markdown(r: dict) -> str:
    """results/agree-pair/summary.md from the eval dict."""
    rec, d, tc = r["recipe"], r["drafter_training"], r["recipe"]["target_config"]
    rope = tc.get("rope_scaling") or {}
    yarn = (f"YaRN factor {rope['factor']} over {rope['original_max_position_embeddings']} (beta_fast "
            f"{rope['beta_fast']}, beta_slow {rope['beta_slow']}, mscale {rope['mscale']}, mscale_all_dim "
            f"{rope['mscale_all_dim']})") if rope else "plain RoPE"
    sh = rec["drafter"]
    lines = [
        f"# Agree pair: a random Kimi-style target and a drafter that agrees with it ({r['prompts']} fresh prompts "
        f"x {r['new_tokens']} tokens, torch reference engine, {r['device']}, {r['dtype']})",
        "",
        "The pair the native engine's DDTree == AR check runs on beside the demo pair: a random target, "
        "so no text, and a real DFlash drafter that agrees with it, so DDTree accepts long paths.",
        "",
        f"Command: `{r['command']}`  ",
        f"Commit: {r['commit']}; date: {r['date']}; machine: {r['machine']}.",
        "",
        "## The pair (refs/models/agree-target, refs/models/agree-drafter)",
        "",
        f"Target: random DeepSeek-V3 architecture (`python_engine/train/agree_target.py`, seed {rec['target_seed']}, "
        f"output projections x {rec['residual_gain']}): vocab {tc['vocab_size']}, hidden {tc['hidden_size']}, "
        f"{tc['num_hidden_layers']} layers (first {tc['first_k_dense_replace']} dense), "
        f"{tc['num_attention_heads']} heads, "
        f"MLA q_lora {tc['q_lora_rank']} / kv_lora {tc['kv_lora_rank']} / rope {tc['qk_rope_head_dim']} / "
        f"nope {tc['qk_nope_head_dim']} / v {tc['v_head_dim']}, MoE {tc['num_experts_per_tok']} of "
        f"{tc['n_routed_experts']} routed experts (intermediate {tc['moe_intermediate_size']}) + "
        f"{tc['n_shared_experts']} shared, sigmoid router with correction bias, n_group {tc['n_group']}, "
        f"routed_scaling_factor {tc['routed_scaling_factor']}, {yarn}, rope_theta {tc['rope_theta']}; "
        "bf16 weights, router float32.",
        "",
        f"Greedy text: {r['ar_distinct_tokens'] and min(r['ar_distinct_tokens'])}..{max(r['ar_distinct_tokens'])} "
        f"distinct tokens per {r['new_tokens']}-token continuation; "
        f"{100 * r['target_context_decided']:.1f}% of the steps differ from the token the embedding alone "
        "predicts (decided by attention and the experts).",
        "",
        f"Drafter: DFlash, {sh['num_hidden_layers']} layers, block {sh['block_size']}, {sh['num_attention_heads']} "
        f"heads ({sh['num_key_value_heads']} kv) x {sh['head_dim']}, intermediate {sh['intermediate_size']}, "
        f"target_layer_ids {list(sh['target_layer_ids'])}, {d['parameters'] / 1e6:.2f} M parameters, bf16. "
        f"Self-distilled on {d['continuations']} greedy continuations of random prompts "
        f"({d['continuation_tokens']} tokens, {d['generation_seconds']} s to generate), {d['steps_run']} steps "
        f"({d['seconds']} s); kept step {d['saved_step']} (validation tau "
        f"{d['saved_val']['tau_budget']:.3f} at budget {d['val_budget']} on {d['val_prompts']} other prompts).",
        "",
        f"Files: {r['pair_bytes'] / 2**20:.2f} MiB in all; "
        + ", ".join(f"{n} {s / 2**20:.2f} MiB" for n, s in r["files"].items() if s > 2**16) + ".",
        "",
        "## DDTree vs AR (T = 0)",
        "",
        "| config | tau | rounds | mean tree size | identical to AR |",
        "|---|---|---|---|---|",
    ]
    n = r["prompts"]
    for s in [*r["t0"], r["chain"]]:
        lines.append(f"| {s['name']} | {s['tau']:.3f} | {s['rounds']} | {s['mean_tree_size']} | "
                     f"{s['matches_ar']}/{n} |")
    best = max(r["t0"], key=lambda s: s["budget"])
    lines += [
        "",
        f"Per-depth acceptance at budget {best['budget']} (P(reach d) / P(reach d-1)): "
        + ", ".join(f"{x:.2f}" for x in best["depth_acceptance"]),
        "",
        f"Every DDTree and chain continuation identical to AR: **{r['all_identical_to_ar']}**. Prompt lengths "
        f"{r['prompt_lens']} (seed {r['seed']}).",
        "",
        f"Regenerate: `{r['command']}` (about {r['total_seconds'] / 60:.0f} minutes on this machine). The target "
        "comes back bit for bit from its seed (tests/decode/test_agree_pair.py); the drafter's data and training "
        "are seeded too, so the same CPU and torch build give the same bytes (tests/demo/test_agree_training.py "
        "checks it on the smoke recipe), unless a time guard shortens a stage: " + guards_note(r),
    ]
    return "\n".join(lines) + "\n"
