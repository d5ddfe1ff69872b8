"""Where a native DDTree run parts from native AR: the engine's round-level invariants, then a
replay of the diverging round through the engine's own primitives.

A GPU debugging tool for the bf16 divergences no near-tie explains (stop 26: the INT4 demo,
seed 357993550, prompt 4 of the test's 32: AR 569 then 9, DDTree 9). It runs the decode test's
requests (same prompts, options and concurrency), the DDTree one twice, and checks after every step:

  * every running request's cache holds prompt + emitted - 1 rows (the last token is the next
    root), and a round emits accept_len tokens unless the request finished;
  * a sampled tree's accepted path is a parent chain and its tokens are what the request
    emitted that round.

For each prompt whose DDTree output differs from AR it decodes that prompt again alone with the
tree of every round, replays that whole run through the primitives (history_replay: does every
round take the engine's path?), and replays the round that emitted the first differing token on
a fresh prefill: the tree through `forward` (the verify pass, ancestor mask) against the
engine's prefill of each path prefix, and the path alone with a causal mask. JSON lines under
--out; a summary is printed. (stop 27, H200: no invariant broken, every history replay equal;
results/h200/bench/README.md.)

  python scripts/divergence_probe.py --target refs/models/demo-target-int4 --dtype bfloat16 \
      --seed 357993550 --out /tmp/probe
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from python_engine.ddtree.tree import Tree
from python_engine.ddtree.visibility import visibility_packed
from python_engine.demo.code_prompts import code_prompts
from python_engine.native.engine import NativeEngine, NativeOptions
from python_engine.native.history_replay import AloneRun, replay_history, tree_of


class Probe:
    def __init__(self, eng: NativeEngine, log):
        self.eng, self.log = eng, log
        self.problems: list[dict] = []

    def problem(self, **kw) -> None:
        self.problems.append(kw)
        self.log(dict(kind="problem", **kw))

    def run(self, prompts, max_new: int, trees: bool, **kw):
        """Tokens per prompt, and per request the rounds (record, tree or None, tokens emitted)."""
        eng = self.eng
        ids = [eng.submit(p, max_new, **kw) for p in prompts]
        plen = dict(zip(ids, map(len, prompts)))
        seen = {i: [] for i in ids}
        rounds = {i: [] for i in ids}
        while True:
            r = eng.step(want_tree=trees)
            for rec in r.records:
                info = eng.request(rec.request)
                new = info.tokens[len(seen[rec.request]):]
                seen[rec.request] = info.tokens
                if not rec.done and rec.emitted != rec.accept_len:
                    self.problem(what="emitted != accept_len", request=rec.request, round=rec.round,
                                 emitted=rec.emitted, accept_len=rec.accept_len)
                tree = r.tree if r.tree and r.tree["request"] == rec.request else None
                if tree is not None:
                    acc = tree["accepted"]
                    chain = all(tree["parent"][acc[j]] == acc[j - 1] for j in range(1, len(acc)))
                    path_tokens = [tree["token"][a] for a in acc[1:]]
                    # `new` ends with the round's bonus (and, in a request's first step, starts with
                    # the token its prefill emitted)
                    if not chain or (not rec.done and new[len(new) - len(path_tokens) - 1:-1] != path_tokens):
                        self.problem(what="tree path", request=rec.request, round=rec.round, chain=chain,
                                     path_tokens=path_tokens, emitted=new, tree=tree)
                rounds[rec.request].append((rec, tree, new))
                if info.state == "running" and info.slot >= 0:
                    rows = eng.slot_lengths(info.slot)[0]
                    if rows != plen[rec.request] + len(info.tokens) - 1:
                        self.problem(what="cache rows", request=rec.request, round=rec.round, rows=rows,
                                     expected=plen[rec.request] + len(info.tokens) - 1)
            if r.rounds == 0 and r.waiting == 0 and r.running == 0:
                break
        return [eng.request(i).tokens for i in ids], [rounds[i] for i in ids]


def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def replay(eng: NativeEngine, prompt, tokens, before: int, tree: Tree, accepted) -> dict:
    """The round that began after `before` emitted tokens: its tree through the verify pass vs
    the engine's prefill of every path prefix, and the path alone (causal)."""
    P = len(prompt)
    ctx = prompt + tokens[:before - 1]  # in the cache when the round began; tokens[before - 1] is the root
    start = len(ctx)
    eng.slot_reset(0)
    eng.prefill(0, ctx)
    lt, _ = eng.forward(0, tree.tokens[None], tree.positions(start)[None], visibility_packed(tree)[None], commit=False)
    path = [int(tree.tokens[a]) for a in accepted]
    lp, _ = eng.forward(0, [path], [list(range(start, start + len(path)))], commit=False)
    out = dict(start=start, prompt_len=P, path=path, nodes=[])
    for j, a in enumerate(accepted):
        eng.slot_reset(0)
        pre, _ = eng.prefill(0, ctx + path[:j + 1])
        v, c = lt[0, a], lp[0, j]
        out["nodes"].append(dict(node=int(a), depth=int(tree.depth[a]), token=path[j], prefill_pick=int(pre.argmax()),
                                 verify_pick=int(v.argmax()), causal_pick=int(c.argmax()),
                                 verify_vs_prefill=float(np.abs(v - pre).max()),
                                 causal_vs_prefill=float(np.abs(c - pre).max()), scale=float(np.abs(pre).max())))
    eng.slot_reset(0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="refs/models/demo-target-int4")
    ap.add_argument("--drafter", default="refs/models/demo-drafter")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--seed", type=int, default=357993550, help="the decode test's seed (its prompts: seed + 3)")
    ap.add_argument("--prompt-offset", type=int, default=3,
                    help="prompts are code_prompts(N, seed + this): 3 as the INT4 test, 0 as the demo pair's")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--budget", type=int, default=32)
    ap.add_argument("--variant", default="gpu")
    ap.add_argument("--replay", type=int, nargs=2, metavar=("PROMPT", "STEP"),
                    help="also replay this prompt's round that emits this step (a check of the tool itself)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    logf = (args.out / "probe.jsonl").open("w")
    log = lambda d: (logf.write(json.dumps(d) + "\n"), logf.flush())  # noqa: E731
    prompts = code_prompts(args.prompts, args.seed + args.prompt_offset)
    opts = NativeOptions(dtype=args.dtype, max_slots=32, max_tokens=512, max_budget=64)
    with NativeEngine(args.target, args.drafter, opts, variant=args.variant) as eng:
        probe = Probe(eng, log)
        ar, _ = probe.run(prompts, args.tokens, trees=False, ar=True)
        dd, rounds = probe.run(prompts, args.tokens, trees=True, budget=args.budget)
        # the same requests again: a run that differs from the first is nondeterministic (a race)
        again, _ = probe.run(prompts, args.tokens, trees=False, budget=args.budget)
        unstable = [i for i, (x, y) in enumerate(zip(dd, again)) if x != y]
        log(dict(kind="repeat", unstable=unstable))
        print(f"DDTree run twice: {len(unstable)} prompts differ between the runs {unstable}")
        diverged = [i for i, (a, d) in enumerate(zip(ar, dd)) if a != d]
        print(f"{args.dtype} {Path(args.target).name} seed {args.seed}: {len(diverged)} of {len(prompts)} prompts differ; "
              f"{len(probe.problems)} invariant problems in the batched runs")
        cases = [(i, first_difference(ar[i], dd[i])) for i in diverged] + ([tuple(args.replay)] if args.replay else [])
        for i, j in cases:
            log(dict(kind="divergence" if i in diverged else "requested", prompt=i, step=j, ar=ar[i], dd=dd[i]))
            print(f"prompt {i} step {j}: AR {ar[i][max(0, j - 3):j + 4]} DDTree {dd[i][max(0, j - 3):j + 4]}")
            emitted = 0
            for rec, _, new in rounds[i]:
                if emitted + len(new) > j:
                    print(f"  batched round {rec.round}: accept_len {rec.accept_len}, emitted {new}, "
                          f"tokens before {emitted}")
                    break
                emitted += len(new)
            alone, alone_rounds = probe.run([prompts[i]], args.tokens, trees=True, budget=args.budget)
            k = first_difference(ar[i], alone[0])
            print(f"  alone: {'same as AR' if alone[0] == ar[i] else f'differs at step {k}'}; "
                  f"same as batched DDTree: {alone[0] == dd[i]}")
            hist = replay_history(eng, prompts[i], AloneRun(alone[0], [(r, t) for r, t, _ in alone_rounds[0]]),
                                  args.budget + 1)
            log(dict(kind="history_replay", prompt=i, **vars(hist)))
            print(f"  history replay of the alone run ({hist.rounds} rounds through prefill + forward + keep): "
                  + ("every round's path as the engine's" if hist.same else "a round without its tree"
                     if hist.missing_tree else f"parts at round {hist.parted}: replay path {hist.replay_path} vs "
                     f"engine {hist.engine_path} (gap {hist.gap})"))
            target_step = k if k is not None else j
            emitted = 0
            for rec, tree, new in alone_rounds[0]:
                if emitted + len(new) > target_step and tree is not None and emitted > 0:
                    rep = replay(eng, prompts[i], alone[0], emitted, tree_of(tree), tree["accepted"])
                    rep.update(kind="replay", prompt=i, round=rec.round, before=emitted, emitted=new, tree=tree)
                    log(rep)
                    for nd in rep["nodes"]:
                        print(f"    node {nd['node']:3d} depth {nd['depth']:2d} token {nd['token']:5d}: picks prefill "
                              f"{nd['prefill_pick']} verify {nd['verify_pick']} causal {nd['causal_pick']}; "
                              f"|verify-prefill| {nd['verify_vs_prefill']:.3g} |causal-prefill| "
                              f"{nd['causal_vs_prefill']:.3g} (scale {nd['scale']:.3g})")
                    break
                emitted += len(new)
        for p in probe.problems[:10]:
            print("problem:", {k: v for k, v in p.items() if k != "tree"})
    logf.close()


if __name__ == "__main__":
    main()
