"""`kdtree bench budget`: `--budget auto` against fixed budgets and AR in one process, on the
same prompts, the configurations interleaved prompt by prompt and the whole repeated, so a
shared machine's changing load falls on all of them alike. Tokens/s is decode tokens over
decode seconds (prefill excluded), summed over every prompt and repeat; the auto budget's
cost model is timed once, at the start, as `kdtree run --budget auto` does.

One more configuration, "first-decrease", is CaDDTree's rule (arXiv 2606.01813) as its
abstract states it, on the same timings: a straight-line (convex) verify cost and the first
size after which the expected throughput falls, with the drafter's probabilities as they
are."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from python_engine.demo.defaults import DEFAULT_DRAFTER, DEFAULT_TARGET
from python_engine.project import PROJECT_ROOT

DEFAULT_BUDGETS = (4, 8, 16, 32, 64)
DEFAULT_OUT = PROJECT_ROOT / "results" / "cpu" / "budget-auto"
# auto is "as good" when its tokens/s is at least this share of the best fixed budget's
WITHIN = 0.95


@dataclass
class BudgetBench:
    budgets: tuple[int, ...] = DEFAULT_BUDGETS
    max_budget: int = 64
    prompts: int = 8
    max_tokens: int = 64
    repeats: int = 3
    seed: int = 0
    target: Path = DEFAULT_TARGET
    drafter: Path = DEFAULT_DRAFTER
    out_dir: Path = DEFAULT_OUT
    say: Callable[[str], None] = field(default=print)


@dataclass
class Tally:
    tokens: int = 0
    decode_s: float = 0.0
    rounds: int = 0
    accepted: int = 0
    per_repeat: list[list[float]] = field(default_factory=list)  # [tokens, seconds] per repeat
    budgets: list[int] = field(default_factory=list)  # each round's budget

    def add(self, gen, repeat: int) -> None:
        while len(self.per_repeat) <= repeat:
            self.per_repeat.append([0, 0.0])
        self.tokens += gen.decode_tokens
        self.decode_s += gen.decode_s
        self.rounds += len(gen.rounds)
        self.accepted += sum(r.accept_len for r in gen.rounds)
        self.per_repeat[repeat][0] += gen.decode_tokens
        self.per_repeat[repeat][1] += gen.decode_s
        self.budgets += [r.budget for r in gen.rounds]

    def summary(self) -> dict:
        return {
            "tokens_per_s": self.tokens / self.decode_s if self.decode_s else 0.0,
            "tokens_per_s_by_repeat": [t / s if s else 0.0 for t, s in self.per_repeat],
            "tau": self.accepted / self.rounds if self.rounds else 0.0,
            "decode_tokens": self.tokens, "decode_s": self.decode_s, "rounds": self.rounds,
            "mean_budget": float(np.mean(self.budgets)) if self.budgets else 0.0,
        }


def run_budget_bench(b: BudgetBench) -> dict:
    import torch

    from kdtree_cli.bench.cpu_run import cpu_run_record
    from python_engine.decode.ar import ar_generate
    from python_engine.decode.budget_auto import AutoBudget, VerifyCosts, measure_verify_costs
    from python_engine.decode.ddtree_loop import ddtree_generate
    from python_engine.demo.code_prompts import code_prompts
    from python_engine.model.drafter import load_drafter
    from python_engine.model.target_loader import load_target

    record = cpu_run_record()
    target = load_target(b.target)
    drafter = load_drafter(b.drafter, target)
    prompts = code_prompts(b.prompts, b.seed)
    longest = max(len(p) for p in prompts) + b.max_tokens
    b.say(f"timing the verify cost model ({len(prompts)} prompts, contexts "
          f"{min(len(p) for p in prompts)}..{longest})")
    policy = AutoBudget(measure_verify_costs(target, b.max_budget, (min(len(p) for p in prompts), longest),
                                             seed=b.seed), b.max_budget)
    first_decrease = AutoBudget(VerifyCosts.affine(list(policy.costs.samples)), b.max_budget, calibrate=False,
                                stop_at_first_decrease=True)
    policies = {"auto": policy, "first-decrease": first_decrease}
    configs: list[str] = ["ar", *(str(n) for n in b.budgets), "first-decrease", "auto"]
    tallies = {c: Tally() for c in configs}
    tokens: dict[str, list[list[int]]] = {c: [[] for _ in prompts] for c in configs}
    for repeat in range(b.repeats):
        for i, prompt in enumerate(prompts):
            shift = (repeat * len(prompts) + i) % len(configs)  # each config leads in turn
            for c in configs[shift:] + configs[:shift]:
                with torch.no_grad():
                    if c == "ar":
                        gen = ar_generate(target, prompt, b.max_tokens)
                    else:
                        gen = ddtree_generate(target, drafter, prompt, b.max_tokens,
                                              budget=policies[c] if c in policies else int(c))
                tallies[c].add(gen, repeat)
                tokens[c][i] = gen.tokens
        done = {c: tallies[c].summary()["tokens_per_s_by_repeat"][repeat] for c in configs}
        b.say(f"repeat {repeat + 1}/{b.repeats}: " + ", ".join(f"{c} {v:.1f}" for c, v in done.items()) + " tok/s")
    results = {c: tallies[c].summary() for c in configs}
    fixed = [str(n) for n in b.budgets]
    best = max(fixed, key=lambda c: results[c]["tokens_per_s"])
    auto_tps = results["auto"]["tokens_per_s"]
    by_repeat = [a / max(results[c]["tokens_per_s_by_repeat"][r] for c in fixed)
                 for r, a in enumerate(results["auto"]["tokens_per_s_by_repeat"])]
    chosen = tallies["auto"].budgets
    first_tps = results["first-decrease"]["tokens_per_s"]
    r = {
        "run": record,
        "target": b.target.name, "drafter": b.drafter.name, "prompts": len(prompts), "prompt_seed": b.seed,
        "max_tokens": b.max_tokens, "repeats": b.repeats, "budgets": list(b.budgets), "max_budget": b.max_budget,
        "configs": results,
        "best_fixed": {"budget": int(best), "tokens_per_s": results[best]["tokens_per_s"]},
        "auto_over_best_fixed": auto_tps / results[best]["tokens_per_s"] if results[best]["tokens_per_s"] else 0.0,
        "auto_over_best_fixed_by_repeat": by_repeat,
        "within": WITHIN,
        "first_decrease_over_best_fixed": first_tps / results[best]["tokens_per_s"] if results[best]["tokens_per_s"] else 0.0,
        "auto_over_first_decrease": auto_tps / first_tps if first_tps else 0.0,
        "auto_chosen_budgets": {str(k): int(v) for k, v in zip(*np.unique(chosen, return_counts=True))},
        "first_decrease_chosen_budgets": {str(k): int(v) for k, v in
                                          zip(*np.unique(tallies["first-decrease"].budgets, return_counts=True))},
        "cost_model": policy.costs.to_json(),
        "first_decrease_cost_model": first_decrease.costs.to_json(),
        "auto_state_at_end": {"overhead_us": policy.overhead_us, "verify_scale": policy.verify_scale,
                              "calibration": policy.calibration},
        "identical_to_ar": {c: sum(t == a for t, a in zip(tokens[c], tokens["ar"])) for c in configs if c != "ar"},
    }
    r["auto_within"] = r["auto_over_best_fixed"] >= WITHIN
    b.out_dir.mkdir(parents=True, exist_ok=True)
    (b.out_dir / "budget-auto.json").write_text(json.dumps(r, indent=2) + "\n")
    (b.out_dir / "budget-auto.md").write_text(markdown(r))
    plot(r, b.out_dir / "budget-auto.png")
    return r


def markdown(r: dict) -> str:
    run = r["run"]
    lines = [
        "# `--budget auto` against fixed budgets", "",
        f"`{run['command']}`", "",
        f"commit {run['commit']}, {run['date']}, {run['device']}", "",
        f"{r['target']} + {r['drafter']}, {r['prompts']} prompts (seed {r['prompt_seed']}) x {r['max_tokens']} "
        f"tokens, {r['repeats']} repeats, every configuration interleaved prompt by prompt; auto searches "
        f"1..{r['max_budget']}.", "",
        "| config | tokens/s | per repeat | tau | mean budget | same tokens as AR |",
        "|---|---|---|---|---|---|",
    ]
    for c, v in r["configs"].items():
        same = "-" if c == "ar" else f"{r['identical_to_ar'][c]}/{r['prompts']}"
        per = " ".join(f"{x:.1f}" for x in v["tokens_per_s_by_repeat"])
        lines.append(f"| {c} | {v['tokens_per_s']:.1f} | {per} | {v['tau']:.2f} | {v['mean_budget']:.1f} | {same} |")
    best = r["best_fixed"]
    lines += ["", f"Best fixed budget: {best['budget']} ({best['tokens_per_s']:.1f} tokens/s). Auto: "
              f"{r['configs']['auto']['tokens_per_s']:.1f} tokens/s = **{r['auto_over_best_fixed']:.3f}x** the best "
              f"fixed (per repeat, against that repeat's best: "
              f"{', '.join(f'{x:.3f}' for x in r['auto_over_best_fixed_by_repeat'])}); "
              f"{'within' if r['auto_within'] else 'NOT within'} {100 * (1 - r['within']):.0f}%.", "",
              f"first-decrease (CaDDTree's rule: a straight-line verify cost, the first size after which the "
              f"expected throughput falls): {r['configs']['first-decrease']['tokens_per_s']:.1f} tokens/s = "
              f"{r['first_decrease_over_best_fixed']:.3f}x the best fixed; auto / first-decrease = "
              f"{r['auto_over_first_decrease']:.3f}.", "",
              "Budgets auto chose (budget: rounds): "
              + ", ".join(f"{k}: {v}" for k, v in r["auto_chosen_budgets"].items()), "",
              "Budgets first-decrease chose: "
              + ", ".join(f"{k}: {v}" for k, v in r["first_decrease_chosen_budgets"].items()), ""]
    return "\n".join(lines)


def plot(r: dict, path: Path) -> None:
    """budget-auto.png from the result alone (so it can be redrawn from budget-auto.json)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    names = list(r["configs"])
    tps = [r["configs"][c]["tokens_per_s"] for c in names]
    colors = ["tab:gray" if c == "ar" else "tab:orange" if c == "auto" else "tab:green" if c == "first-decrease"
              else "tab:blue" for c in names]
    left.bar(names, tps, color=colors)
    for x, c in enumerate(names):
        reps = r["configs"][c]["tokens_per_s_by_repeat"]
        left.scatter([x] * len(reps), reps, color="black", s=8, zorder=3)
    left.tick_params(axis="x", labelrotation=30)
    left.set_xlabel("budget (ar: no drafter)")
    left.set_ylabel("decode tokens/s")
    left.set_title("tokens/s (bars: all repeats; dots: each repeat)")
    for key, color, label in (("first_decrease_chosen_budgets", "tab:green", "first-decrease"),
                              ("auto_chosen_budgets", "tab:orange", "auto")):
        counts = r.get(key, {})
        right.bar([int(k) for k in counts], list(counts.values()), width=0.9, color=color, alpha=0.7, label=label)
    right.legend(fontsize=8)
    right.set_xlabel("budget chosen")
    right.set_ylabel("rounds")
    right.set_title("budgets chosen per round")
    fig.suptitle(f"{r['target']}: auto {r['auto_over_best_fixed']:.3f}x the best fixed budget "
                 f"({r['best_fixed']['budget']}); {r['run']['commit']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
