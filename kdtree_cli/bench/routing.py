"""`kdtree bench routing`: how much the tokens of one DDTree round share routed experts.

For each pair (the trained demo pair; the agree pair, whose target is random), the torch
engine decodes prompts with DDTree at a fixed budget of `max_tree - 1` nodes, the drafter's
real trees, and the target's routing observer (TargetModel.routing_observer) records the
experts every verify row chose in every MoE layer. Node i of a tree sees only its
ancestors, all numbered below it, and the tree of the first T - 1 nodes is the best tree of
that budget (docs/ddtree.md), so the first T rows of one verify are exactly the T tokens of
the round at the budget T - 1: one verify gives every T = 1..max_tree.

Per layer and T it reports the mean over rounds of the distinct experts the T tokens touch,
beside
  random     E * (1 - (1 - k/E)^T): T tokens each routed to k experts independently at random;
  unrelated  T rows drawn at random from all rounds of all prompts (independent tokens with
             the trained router's uneven expert use);
and the ratio measured / random, the table `kdtree plan` reads (`ratio_by_T`), with the
effective independent token count: the T' whose random expectation equals the measured
count (T' = ln(1 - d/E) / ln(1 - k/E)), undefined once d reaches E.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from python_engine.demo.defaults import DEFAULT_DRAFTER, DEFAULT_TARGET, MODELS_DIR
from python_engine.project import PROJECT_ROOT

DEFAULT_OUT = PROJECT_ROOT / "results" / "cpu" / "routing-sharing"
PAIRS = {
    "demo": (DEFAULT_TARGET, DEFAULT_DRAFTER),
    "agree": (MODELS_DIR / "agree-target", MODELS_DIR / "agree-drafter"),
}
UNRELATED_DRAWS = 400  # random sets of rows per layer for the "unrelated" baseline
# a measured count within this many experts of E is saturated: no effective token count
SATURATED = 0.05


@dataclass
class RoutingBench:
    pairs: tuple[str, ...] = ("demo", "agree")
    prompts: int = 32
    max_tokens: int = 64
    max_tree: int = 65  # T = 1..max_tree tokens a round (root + max_tree - 1 nodes)
    seed: int = 0
    out_dir: Path = DEFAULT_OUT
    say: Callable[[str], None] = field(default=print)


def random_expectation(E: int, k: int, T: np.ndarray) -> np.ndarray:
    """Distinct experts T tokens touch when each picks k of E at random: E(1 - (1 - k/E)^T)."""
    return E * (1.0 - (1.0 - k / E) ** np.asarray(T, dtype=np.float64))


def effective_tokens(distinct: np.ndarray, E: int, k: int) -> list[float | None]:
    """The T' with random_expectation(E, k, T') = distinct; None where distinct is within
    SATURATED of E (every count near E fits any large T')."""
    out = []
    for d in np.asarray(distinct, dtype=np.float64):
        out.append(None if d >= E - SATURATED else float(np.log(1 - d / E) / np.log(1 - k / E)))
    return out


def distinct_by_prefix(rows: np.ndarray, E: int) -> np.ndarray:
    """rows int [T, k] (the experts each row chose): distinct experts among rows[:t] for
    t = 1..T."""
    T = rows.shape[0]
    first = np.full(E, T, dtype=np.int64)  # the first row each expert appears in (T: never)
    np.minimum.at(first, rows.reshape(-1), np.repeat(np.arange(T), rows.shape[1]))
    return np.searchsorted(np.sort(first), np.arange(1, T + 1), side="left")


def pair_prompts(name: str, count: int, seed: int, vocab: int) -> list[list[int]]:
    """The demo pair's prompts: lines of Python it was trained on; the agree pair's (no
    tokenizer, random target): random ids, 4-32 of them."""
    if name == "demo":
        from python_engine.demo.code_prompts import code_prompts

        return code_prompts(count, seed)
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, size=int(rng.integers(4, 33))).tolist() for _ in range(count)]


def measure_pair(name: str, b: RoutingBench) -> dict:
    import torch

    from python_engine.decode.ddtree_loop import ddtree_generate
    from python_engine.model.drafter import load_drafter
    from python_engine.model.target_loader import load_target

    target_dir, drafter_dir = PAIRS[name]
    target = load_target(target_dir)
    drafter = load_drafter(drafter_dir, target)
    cfg = target.cfg
    E, k = cfg.n_routed_experts, cfg.num_experts_per_tok
    moe_layers = [i for i, lw in enumerate(target.w.layers) if lw.moe is not None]
    last: dict[int, np.ndarray] = {}
    target.routing_observer = lambda layer, experts: last.__setitem__(layer, experts.cpu().numpy())
    curves: dict[int, list[np.ndarray]] = {i: [] for i in moe_layers}  # per layer, per full round
    pool: dict[int, list[np.ndarray]] = {i: [] for i in moe_layers}  # every verify row's experts
    sizes = []

    def round_done(info) -> None:
        sizes.append(info.tree_size + 1)
        for i in moe_layers:  # the verify that just ran: root + tree_size rows
            rows = last[i][: info.tree_size + 1]
            pool[i].append(rows)
            if rows.shape[0] == b.max_tree:
                curves[i].append(distinct_by_prefix(rows, E))

    prompts = pair_prompts(name, b.prompts, b.seed, cfg.vocab_size)
    tokens = 0
    for n, prompt in enumerate(prompts):
        with torch.no_grad():
            gen = ddtree_generate(target, drafter, prompt, b.max_tokens, budget=b.max_tree - 1, on_round=round_done)
        tokens += len(gen.tokens)
        if (n + 1) % 8 == 0:
            b.say(f"{name}: {n + 1}/{len(prompts)} prompts, {len(sizes)} rounds")
    target.routing_observer = None
    T = np.arange(1, b.max_tree + 1)
    random = random_expectation(E, k, T)
    rng = np.random.default_rng(b.seed)
    layers = {}
    for i in moe_layers:
        measured = np.mean(curves[i], axis=0)
        everything = np.concatenate(pool[i])
        draws = [distinct_by_prefix(everything[rng.choice(len(everything), b.max_tree, replace=False)], E)
                 for _ in range(UNRELATED_DRAWS)]
        unrelated = np.mean(draws, axis=0)
        use = np.bincount(everything.reshape(-1), minlength=E) / everything.size
        layers[str(i)] = {
            "measured": measured.tolist(), "unrelated": unrelated.tolist(),
            "ratio": (measured / random).tolist(), "ratio_unrelated": (unrelated / random).tolist(),
            "effective_tokens": effective_tokens(measured, E, k),
            "expert_use": use.tolist(),  # share of all routed slots each expert took
        }
    mean = np.mean([layers[str(i)]["measured"] for i in moe_layers], axis=0)
    unrelated_mean = np.mean([layers[str(i)]["unrelated"] for i in moe_layers], axis=0)
    return {
        "target": target_dir.name, "drafter": drafter_dir.name, "experts": E, "top_k": k,
        "n_group": cfg.n_group, "topk_group": cfg.topk_group, "moe_layers": moe_layers,
        "prompts": len(prompts), "tokens": tokens, "rounds": len(sizes), "full_rounds": len(curves[moe_layers[0]]),
        "T": T.tolist(), "random": random.tolist(),
        "all_layers": {"measured": mean.tolist(), "unrelated": unrelated_mean.tolist(),
                       "ratio": (mean / random).tolist(), "ratio_unrelated": (unrelated_mean / random).tolist(),
                       "effective_tokens": effective_tokens(mean, E, k)},
        "layers": layers,
    }


def run_routing_bench(b: RoutingBench) -> dict:
    from kdtree_cli.bench.cpu_run import cpu_run_record

    record = cpu_run_record()
    pairs = {name: measure_pair(name, b) for name in b.pairs}
    source = "demo" if "demo" in pairs else next(iter(pairs))
    r = {
        "run": record,
        "method": "mean over rounds of the distinct routed experts the first T verify rows of a round chose, "
                  "per MoE layer; trees from the real drafter at a fixed budget of max_tree - 1 nodes",
        "prompts": b.prompts, "max_tokens": b.max_tokens, "seed": b.seed,
        # what `kdtree plan` reads: the measured / random ratio by T, mean over the MoE layers
        "ratio_by_T": {
            "measured_on": f"{pairs[source]['target']} + {pairs[source]['drafter']} "
                           f"(E={pairs[source]['experts']}, top-{pairs[source]['top_k']})",
            "T": pairs[source]["T"], "ratio": pairs[source]["all_layers"]["ratio"],
            "effective_tokens": pairs[source]["all_layers"]["effective_tokens"],
        },
        "pairs": pairs,
    }
    b.out_dir.mkdir(parents=True, exist_ok=True)
    (b.out_dir / "routing.json").write_text(json.dumps(r, indent=1) + "\n")
    (b.out_dir / "routing.md").write_text(markdown(r))
    plot(r, b.out_dir / "routing.png")
    return r


SHOWN_T = (1, 2, 4, 8, 16, 32, 65)


def markdown(r: dict) -> str:
    run = r["run"]
    lines = ["# Routed experts a DDTree round's tokens touch", "", f"`{run['command']}`", "",
             f"commit {run['commit']}, {run['date']}, {run['device']}", "",
             f"Method: {r['method']}. random = E(1 - (1 - k/E)^T); unrelated = T rows drawn from all rounds "
             "(independent tokens, the router's real expert use); ratio = measured / random.", ""]
    for name, p in r["pairs"].items():
        shown = [t for t in SHOWN_T if t <= len(p["T"])]
        lines += [f"## {name}: {p['target']} + {p['drafter']} (E = {p['experts']}, top-{p['top_k']}, "
                  f"MoE layers {p['moe_layers']})", "",
                  f"{p['prompts']} prompts, {p['tokens']} tokens, {p['rounds']} rounds "
                  f"({p['full_rounds']} with a full tree).", "",
                  "| T | " + " | ".join(str(t) for t in shown) + " |",
                  "|---|" + "---|" * len(shown)]

        def row(label, values, fmt="{:.2f}"):
            return f"| {label} | " + " | ".join("-" if values[t - 1] is None else fmt.format(values[t - 1])
                                                for t in shown) + " |"

        a = p["all_layers"]
        lines += [row("random", p["random"]), row("measured (mean of layers)", a["measured"]),
                  row("unrelated tokens", a["unrelated"]), row("measured / random", a["ratio"], "{:.3f}"),
                  row("unrelated / random", a["ratio_unrelated"], "{:.3f}"),
                  row("effective tokens", a["effective_tokens"], "{:.1f}")]
        for layer, v in p["layers"].items():
            lines.append(row(f"layer {layer} measured / random", v["ratio"], "{:.3f}"))
        lines.append("")
    return "\n".join(lines)


def plot(r: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = list(r["pairs"].items())
    fig, axes = plt.subplots(len(pairs), 2, figsize=(11, 3.6 * len(pairs)), squeeze=False)
    for (name, p), (left, right) in zip(pairs, axes):
        T = p["T"]
        left.plot(T, p["random"], "k--", label="random E(1-(1-k/E)^T)")
        left.plot(T, p["all_layers"]["unrelated"], color="tab:gray", label="unrelated tokens")
        left.plot(T, p["all_layers"]["measured"], color="tab:orange", lw=2, label="DDTree round (mean of layers)")
        left.set_title(f"{name}: E={p['experts']}, top-{p['top_k']}")
        left.set_xlabel("tokens in the round (T)")
        left.set_ylabel("distinct experts per layer")
        left.legend(fontsize=8)
        for layer, v in p["layers"].items():
            right.plot(T, v["ratio"], label=f"layer {layer}")
        right.plot(T, p["all_layers"]["ratio_unrelated"], color="tab:gray", ls=":", label="unrelated")
        right.axhline(1.0, color="k", lw=0.5)
        right.set_xlabel("tokens in the round (T)")
        right.set_ylabel("measured / random")
        right.set_title(f"{name}: ratio per MoE layer")
        right.legend(fontsize=7)
    fig.suptitle(f"routed experts a round touches; {r['run']['commit']}, {r['run']['date']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
