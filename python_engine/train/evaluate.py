"""Held-out evaluation of the demo pair, with the reference engine (python_engine.decode):

- the target's perplexity on held-out windows (transformers, float32);
- T = 0: tau (mean accepted tokens per target forward) for each node budget and for the
  chain (budget B-1, top-1 per depth), per-depth acceptance, and a check that every DDTree
  continuation equals AR's token for token;
- T = 1: tau at one budget (sampled, lossless acceptance).
Prompts are random held-out windows (files the tokenizer and the models never trained on),
each starting with EOS.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from python_engine.decode.result import tau
from python_engine.train.batches import fixed_windows
from python_engine.train.chain import ChainDrafter
from python_engine.train.progress import Progress
from python_engine.train.recipe import Recipe
from python_engine.train.tokenizer import EOS_ID, TokenizedCorpus


def heldout_prompts(tokens: TokenizedCorpus, count: int, length: int, seed: int) -> list[list[int]]:
    windows = fixed_windows(tokens.heldout, length - 1, count, seed)[:, : length - 1]
    return [[EOS_ID] + [int(t) for t in w] for w in windows]


@torch.no_grad()
def perplexity(target_dir: Path, tokens: TokenizedCorpus, recipe: Recipe, device: torch.device) -> dict:
    from python_engine.train.target_model import load_hf_target
    from python_engine.train.target_train import heldout_loss

    ev, tt = recipe.evaluation, recipe.target_training
    model = load_hf_target(target_dir, device)
    windows = fixed_windows(tokens.heldout, tt.seq_len, ev.ppl_windows, ev.seed)
    loss = heldout_loss(model, windows, min(32, ev.ppl_windows), device)
    return {"heldout_loss": round(loss, 4), "heldout_ppl": round(math.exp(loss), 3),
            "tokens": int(windows[:, 1:].size)}


@dataclass
class RunSet:
    """The rounds of one configuration over all prompts."""

    name: str
    budget: int
    temperature: float
    accept: list[int]
    tree_sizes: list[int]
    tokens: int
    decode_s: float
    matches_ar: int | None = None

    def summary(self, depth: int) -> dict:
        acc = np.asarray(self.accept)
        reach = [float((acc - 1 >= d).mean()) for d in range(1, depth + 1)]  # P(path reaches depth d)
        conditional = [reach[0]] + [reach[d] / reach[d - 1] if reach[d - 1] > 0 else 0.0 for d in range(1, depth)]
        out = {
            "name": self.name, "budget": self.budget, "temperature": self.temperature,
            "tau": round(tau(self.accept), 4), "rounds": len(acc),
            "mean_tree_size": round(float(np.mean(self.tree_sizes)), 2),
            "tokens_per_s": round(self.tokens / self.decode_s, 1) if self.decode_s > 0 else None,
            "accept_hist": np.bincount(acc, minlength=depth + 2)[1:].tolist(),
            "depth_reach": [round(r, 4) for r in reach],
            "depth_acceptance": [round(c, 4) for c in conditional],
        }
        if self.matches_ar is not None:
            out["matches_ar"] = self.matches_ar
        return out


def run_config(target, drafter, prompts, new_tokens, budget, temperature, seed, name, ar_tokens=None,
               progress: Progress | None = None) -> RunSet:
    from python_engine.decode.ddtree_loop import ddtree_generate

    rs = RunSet(name, budget, temperature, [], [], 0, 0.0, 0 if ar_tokens is not None else None)
    for i, prompt in enumerate(prompts):
        gen = ddtree_generate(target, drafter, prompt, new_tokens, budget, temperature=temperature,
                              generator=torch.Generator().manual_seed(seed + i))
        rs.accept += [r.accept_len for r in gen.rounds]
        rs.tree_sizes += [r.tree_size for r in gen.rounds]
        rs.tokens += gen.decode_tokens
        rs.decode_s += gen.decode_s
        if ar_tokens is not None:
            rs.matches_ar += int(gen.tokens == ar_tokens[i])
    if progress:
        s = rs.summary(1)
        extra = f", {rs.matches_ar}/{len(prompts)} identical to AR" if ar_tokens is not None else ""
        progress.say(f"{name:>12}: tau {s['tau']:.3f} over {s['rounds']} rounds{extra}")
    return rs


def evaluate(recipe: Recipe, tokens: TokenizedCorpus, target_dir: Path, drafter_dir: Path,
             device: torch.device, dtype: str = "float32", partial=lambda done: None) -> dict:
    """The evaluation dict (see summary_markdown); `partial(done)` gets the results so far
    after every configuration, so a run stopped by a time limit still leaves numbers."""
    from python_engine.decode.ar import ar_generate
    from python_engine.model.drafter import load_drafter
    from python_engine.model.target_loader import load_target, parse_dtype

    ev = recipe.evaluation
    progress = Progress("eval", 1)
    t0 = time.perf_counter()
    ppl = perplexity(target_dir, tokens, recipe, device)
    progress.say(f"target held-out perplexity {ppl['heldout_ppl']:.2f} (loss {ppl['heldout_loss']:.3f}) "
                 f"over {ppl['tokens']} tokens")

    target = load_target(target_dir, device=device, dtype=parse_dtype(dtype))
    drafter = load_drafter(drafter_dir, target)
    depth = drafter.block_size - 1
    prompts = heldout_prompts(tokens, ev.prompts, ev.prompt_len, ev.seed)
    ar_tokens, ar_tok, ar_s = [], 0, 0.0
    for prompt in prompts:
        gen = ar_generate(target, prompt, ev.new_tokens)
        ar_tokens.append(gen.tokens)
        ar_tok += gen.decode_tokens
        ar_s += gen.decode_s
    progress.say(f"AR baseline: {ar_tok / ar_s:.1f} tokens/s on {device} ({dtype})")
    done = {"target": ppl, "ar_tokens_per_s": round(ar_tok / ar_s, 1), "t0": []}

    # the chain first: with it and budget 64 the goal can be judged from a partial run
    chain = run_config(target, ChainDrafter(drafter), prompts, ev.new_tokens, depth, 0.0, ev.seed, "chain",
                       ar_tokens, progress)
    done["chain"] = chain.summary(depth)
    partial(done)
    t_zero = []
    for b in sorted(ev.budgets, key=lambda b: (b != 64, b)):
        t_zero.append(run_config(target, drafter, prompts, ev.new_tokens, b, 0.0, ev.seed, f"budget {b}", ar_tokens,
                                 progress))
        done["t0"].append(t_zero[-1].summary(depth))
        partial(done)
    t_one = run_config(target, drafter, prompts, ev.new_tokens, ev.t1_budget, 1.0, ev.seed,
                       f"T=1 budget {ev.t1_budget}", None, progress)

    by_budget = {r.budget: r.summary(depth) for r in t_zero}
    chain_s = chain.summary(depth)
    goal_budget = 64 if 64 in by_budget else max(by_budget)
    result = {
        "device": str(device), "dtype": dtype,
        "prompts": len(prompts), "prompt_len": ev.prompt_len, "new_tokens": ev.new_tokens,
        "block_size": drafter.block_size,
        "target": ppl,
        "ar": {"tokens_per_s": round(ar_tok / ar_s, 1)},
        "t0": [by_budget[b] for b in ev.budgets],
        "chain": chain_s,
        "t1": t_one.summary(depth),
        "goal": {
            "budget": goal_budget,
            "tau": by_budget[goal_budget]["tau"],
            "tau_at_least_3": by_budget[goal_budget]["tau"] >= 3.0,
            "ddtree_above_chain": by_budget[goal_budget]["tau"] > chain_s["tau"],
            "all_identical_to_ar": all(r["matches_ar"] == len(prompts) for r in [*by_budget.values(), chain_s]),
        },
        "seconds": round(time.perf_counter() - t0, 1),
    }
    return result


def summary_markdown(result: dict) -> str:
    """The evaluation as a short markdown table (results/demo/summary.md)."""
    lines = [
        f"# Demo pair: held-out evaluation ({result['prompts']} prompts x {result['new_tokens']} tokens, "
        f"{result['device']}, {result['dtype']})",
        "",
        f"Target held-out perplexity: **{result['target']['heldout_ppl']}** "
        f"(loss {result['target']['heldout_loss']} nats/token, {result['target']['tokens']} tokens).",
        "",
        f"Tokens/s are the torch reference engine's on {result['device']} (AR baseline: "
        f"{result['ar']['tokens_per_s']} tokens/s); they say little about the native engine.",
        "",
        "| T | config | tau | rounds | mean tree size | tokens/s | identical to AR |",
        "|---|---|---|---|---|---|---|",
    ]
    n = result["prompts"]
    for r in [*result["t0"], result["chain"]]:
        lines.append(f"| 0 | {r['name']} | {r['tau']:.3f} | {r['rounds']} | {r['mean_tree_size']} | "
                     f"{r['tokens_per_s']} | {r.get('matches_ar', '-')}/{n} |")
    t1 = result["t1"]
    lines.append(f"| 1 | {t1['name']} | {t1['tau']:.3f} | {t1['rounds']} | {t1['mean_tree_size']} | "
                 f"{t1['tokens_per_s']} | - |")
    g = result["goal"]
    best = next(r for r in result["t0"] if r["budget"] == g["budget"])
    lines += [
        "",
        f"Per-depth acceptance (P(reach d) / P(reach d-1)), budget {g['budget']}: "
        + ", ".join(f"{x:.2f}" for x in best["depth_acceptance"]),
        "",
        "Chain per-depth acceptance: " + ", ".join(f"{x:.2f}" for x in result["chain"]["depth_acceptance"]),
        "",
        f"Goal (budget {g['budget']}): tau {g['tau']:.3f} >= 3: **{g['tau_at_least_3']}**; "
        f"above the chain ({result['chain']['tau']:.3f}): **{g['ddtree_above_chain']}**; "
        f"every DDTree continuation identical to AR: **{g['all_identical_to_ar']}**.",
    ]
    d = result.get("drafter_training") or {}
    if d.get("saved_val"):
        v = d["saved_val"]
        lines += [
            "",
            f"Drafter: {d.get('continuations')} self-distilled continuations "
            f"({(d.get('continuation_tokens') or 0) / 1e6:.2f} M tokens), {d.get('steps_run')} steps; its validation "
            f"on {d.get('val_prompts')} other held-out prompts (the engine's rounds, step {d.get('saved_step')}): "
            f"tau {v['tau_budget']:.3f} at budget {d.get('val_budget')}, chain {v['chain_tau']:.3f}.",
        ]
    return "\n".join(lines) + "\n"
