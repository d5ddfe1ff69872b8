"""Deterministic synthetic metrics-event files for the TUI tests (until the torch engine
records real ones; the tests take any *.jsonl in tests/tui/data/).

The simulation is plausible, not faithful: a tree of `budget` nodes whose deepest branch
reaches a sampled depth, an accepted path walked from the root with a per-depth chance
that the target agrees with a child, stage times that grow with the tree, a few slow
rounds, prefill gaps between requests and a request that stops at its token limit. All
events pass python_engine.events.validate.

    python tests/tui/make_events.py            # rewrite tests/tui/data/synthetic_*.jsonl
    python tests/tui/make_events.py --out DIR  # elsewhere
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # a script run directly: it puts the project on sys.path itself
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from python_engine.events import validate  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"
WORDS = (
    " the", " a", " of", " and", " to", " in", " is", " that", " tree", " token", " draft",
    " model", " it", " we", " for", " on", ",", ".", " verify", " accept", " path", " root",
    " node", " block", " cache", " time", " fast", " not", " with", " as", "\n",
)


def _tree(rng: random.Random, n: int, depth: int) -> list[int]:
    """parent[0..n] (root first, parent[0] = -1): a spine reaching `depth`, the other
    nodes hung under shallower nodes, shallow ones more often (as best-first trees do)."""
    parent = [-1] + list(range(depth))  # nodes 1..depth form the spine
    node_depth = list(range(depth + 1))
    while len(parent) <= n:
        cands = [i for i, d in enumerate(node_depth) if d < depth]
        weights = [0.55 ** node_depth[i] for i in cands]
        p = rng.choices(cands, weights)[0]
        parent.append(p)
        node_depth.append(node_depth[p] + 1)
    return parent


def _walk(rng: random.Random, parent: list[int], agree: float) -> list[int]:
    """The accepted path: at each node the target agrees with one of its children with a
    chance that decays with depth; it is the first (most likely) child most of the time."""
    children: dict[int, list[int]] = {}
    for i, p in enumerate(parent[1:], 1):
        children.setdefault(p, []).append(i)
    path, node, d = [0], 0, 0
    while children.get(node) and rng.random() < agree * 0.93**d:
        kids = children[node]
        node = kids[0] if rng.random() < 0.75 or len(kids) == 1 else rng.choice(kids[1:])
        path.append(node)
        d += 1
    return path


def make_run(
    seed: int,
    *,
    engine: str = "torch",
    requests: int = 3,
    max_new_tokens: int = 500,
    block_size: int = 16,
    budget: int = 32,
    temperature: float = 0.0,
    with_tree: bool = True,
    gpus: int = 0,
    error_after_request: int | None = None,
) -> list[dict]:
    rng = random.Random(seed)
    D = block_size - 1
    t = 0.0
    events: list[dict] = []

    def emit(kind: str, **fields) -> None:
        event = {"event": kind, "t": round(t, 6), **fields}
        validate(event)  # the contract's check (it returns the cleaned copy; keep the original)
        events.append(event)

    emit(
        "run_start", engine=engine, model="deepseek-v3-tiny-demo", drafter="dflash-tiny-demo",
        device="cuda:0" if gpus <= 1 else f"cuda:0-{gpus - 1}", host="ct200", dtype="bfloat16",
        block_size=block_size, budget=budget, temperature=temperature, writer="make_events.py",
    )
    total_tokens = rounds = accept_sum = 0
    decode_s = 0.0
    bonus = rng.choice(WORDS)
    for req in range(requests):
        agree = (0.92, 0.8, 0.86, 0.7)[req % 4]  # some prompts draft better than others
        t += 0.25  # prefill
        tokens = 1  # the prefill's token
        r = 0
        while tokens < max_new_tokens:
            depth = min(D, max(1, round(rng.gauss(0.55 * D, 2.0))))
            n = max(depth, budget)
            parent = _tree(rng, n, depth)
            path = _walk(rng, parent, agree)
            a = len(path)
            times = {
                "draft": round(rng.gauss(2800, 120), 1),
                "tree_build": round(300 + 6 * n + rng.gauss(0, 20), 1),
                "verify": round(12000 + 90 * n + rng.gauss(0, 400), 1),
                "commit": round(250 + 40 * a + rng.gauss(0, 15), 1),
            }
            if rng.random() < 0.02:
                times["verify"] += 30000  # a slow round (allocator, clock throttle)
            dt = sum(times.values()) * 1e-6 + 150e-6  # + the loop's own overhead
            t += dt
            decode_s += dt
            tokens = min(max_new_tokens, tokens + a)
            fields = dict(
                request=req, round=r, accept_len=a, tree_size=n, tree_depth=depth,
                times_us=times, tokens=tokens,
            )
            if with_tree:
                toks = [rng.randrange(32000) for _ in parent]
                text = [bonus] + [rng.choice(WORDS) for _ in parent[1:]]
                fields["tree"] = {"parent": parent, "tokens": toks, "accepted": path, "text": text}
                bonus = rng.choice(WORDS)
            if gpus and r % 10 == 0:
                fields["gpus"] = [
                    {"id": g, "util": round(min(100.0, rng.gauss(82 - 9 * g, 4)), 1),
                     "mem_gb": round(61.5 + 3 * g + 0.001 * tokens, 2), "mem_total_gb": 141.0,
                     "power_w": round(rng.gauss(520 - 40 * g, 15), 1)}
                    for g in range(gpus)
                ]
            emit("round", **fields)
            rounds += 1
            accept_sum += a
            r += 1
        total_tokens += tokens
        if error_after_request == req:
            t += 0.001
            emit("error", message=f"request {req + 1}: prompt is 5210 tokens, longer than "
                 "max_context 4096; kept its last 4096 tokens (raise --max-context to keep all)")
    t += 0.002
    emit(
        "run_end", tokens=total_tokens, decode_s=round(decode_s, 6),
        tokens_per_s=round(total_tokens / decode_s, 3), tau=round(accept_sum / rounds, 6),
        rounds=rounds,
    )
    return events


FILES = {
    # tree + GPU figures + an error event: every panel has something to show
    "synthetic_tree_gpus.jsonl": dict(seed=8, requests=3, gpus=2, error_after_request=0),
    # only the contract's required fields, another engine and shape
    "synthetic_minimal.jsonl": dict(
        seed=9, engine="native", requests=2, max_new_tokens=300, block_size=8, budget=24,
        temperature=0.7, with_tree=False,
    ),
}


def write_all(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, kwargs in FILES.items():
        path = out / name
        lines = [json.dumps(e, separators=(",", ":")) for e in make_run(**kwargs)]
        path.write_text("\n".join(lines) + "\n")
        paths.append(path)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DATA)
    for p in write_all(ap.parse_args().out):
        print(p, sum(1 for _ in p.open()), "lines")


if __name__ == "__main__":
    main()
