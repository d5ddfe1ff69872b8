"""Native forwards vs the torch reference, same checkpoint, same inputs: a
prefill of 210 tokens in 64-token chunks, a cached single-token decode, a 64-node tree
verify under its ancestor mask, the cache after keeping one accepted path (then another
decode), the context features, and the drafter's logits; on the demo pair and two random
configs, and the INT4 demo target (routed experts packed: dequantized at load in float32,
the W4A16 kernel in bf16).

float32: relative error (over the whole output) <= 1e-4 against the float32 reference.
bf16: both engines round differently, so the reference is float32 and the bound is
relative: the native bf16 output must be within 2e-2 of it, or no further from it than twice
the largest difference the torch bf16 reference itself shows on this input (its bf16 noise). Two bf16 implementations that round at different points
land a few percent apart on the residual stream (the torch bf16 reference itself is 1-10%
from float32 on these models; see the numbers each run prints), so a fixed bound alone
would fail on noise, while a real bug is off by O(1). The outputs of one step (its logits
and features) may exceed their bound up to 10x: a bf16 near-tie in the router sends that
step's token to another expert in one engine and not the other, a discontinuity in
everything that token produces (seen in both engines: an after-keep logit 0.38 from float32
in each; seed 1051028036: the decode token's 8th and 9th expert scores 0.29% apart in the
last layer, under bf16's 0.39% rounding, and its logits and features 0.14 / 0.18 off while
every other step stays at 1-3e-2). A bug moves most steps, not one."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from native_cases import DEMO_DRAFTER, DEMO_TARGET, DEMO_TARGET_INT4, RANDOM_CONFIGS, random_pair, record, rel
from native_sizes import PREFILL_TOKENS, TREE_NODES

from python_engine.ddtree import build_tree, visibility_dense, visibility_packed
from python_engine.model.drafter import load_drafter
from python_engine.model.target_loader import load_target
from python_engine.native.engine import NativeEngine, NativeOptions

F32_TOL = 1e-4
BF16_TOL = 2e-2
BF16_SLACK = 2.0  # native bf16 may be this much further from float32 than torch bf16 is
ROUTING_FLIP_SLACK = 10.0  # one bf16 output may be this far over (a routing near-tie; see above)
PREFILL_CHUNK = 64  # several chunks: the later ones attend to a cached prefix


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    root = tmp_path_factory.mktemp("native-pairs")
    out = {"demo": (DEMO_TARGET, DEMO_DRAFTER), "demo_int4": (DEMO_TARGET_INT4, DEMO_DRAFTER)}
    for i, name in enumerate(RANDOM_CONFIGS):
        out[name] = random_pair(root, name, seed=71 + 2 * i)
    return out


def step_of(output: str) -> str:
    """The forward step an output comes from: 'decode' for decode_logits and decode_features."""
    return output.rsplit("_", 1)[0]


def random_tree(rng, vocab: int, nodes: int, depth: int):
    """A best-first tree of `nodes` nodes over random draft distributions."""
    logp = np.sort(np.log(rng.dirichlet(np.ones(nodes), size=depth)).astype(np.float32), axis=1)[:, ::-1]
    tok = np.stack([rng.choice(vocab, size=nodes, replace=False) for _ in range(depth)])
    tree = build_tree(np.ascontiguousarray(logp), tok, nodes, root_token=int(rng.integers(vocab)))
    assert tree.n == nodes
    return tree


def keep_path(tree) -> list[int]:
    """An accepted path that skips nodes (so compaction really moves rows)."""
    kids = tree.children()
    path = [0]
    while kids[path[-1]] and len(path) < 4:
        path.append(min(kids[path[-1]].values()) if len(path) % 2 else max(kids[path[-1]].values()))
    return path


def torch_run(tdir, ddir, dtype, device, case) -> dict[str, np.ndarray]:
    """Every output the test compares, from the torch reference engine."""
    target = load_target(tdir, device, dtype)
    drafter = load_drafter(ddir, target)
    ids = tuple(drafter.target_layer_ids)
    prompt, token, bonus, tree, path = case["prompt"], case["token"], case["bonus"], case["tree"], case["path"]
    P = len(prompt)
    cache = target.new_cache(P + 2 * tree.n + 8)
    f = lambda t: t.float().cpu().numpy()  # noqa: E731
    out = {}
    ref = target.forward(prompt, torch.arange(P), cache, hidden_layers=ids)
    out["prefill_logits"], out["prefill_features"] = f(ref.logits[-1]), f(ref.features(ids))
    dec = target.forward([token], [P], cache, hidden_layers=ids)
    out["decode_logits"], out["decode_features"] = f(dec.logits[0]), f(dec.features(ids)[0])
    ctx = torch.cat([ref.features(ids), dec.features(ids)])
    out["drafter_logits"] = f(drafter.draft(drafter.new_state(), None, ctx, bonus, P + 1, drafter.block_size))
    past, T = P + 1, tree.n + 1
    vis = torch.ones(T, past + T, dtype=torch.bool)
    vis[:, past:] = torch.from_numpy(visibility_dense(tree))
    ver = target.forward(tree.tokens.tolist(), tree.positions(past), cache, vis.to(device), hidden_layers=ids)
    out["verify_logits"], out["verify_features"] = f(ver.logits), f(ver.features(ids))
    cache.compact(past + np.asarray(path), past + np.arange(len(path)))
    out["after_keep_logits"] = f(target.forward([token], [past + len(path)], cache).logits[0])
    return out


def native_run(tdir, ddir, dtype, variant, case) -> dict[str, np.ndarray]:
    prompt, token, bonus, tree, path = case["prompt"], case["token"], case["bonus"], case["tree"], case["path"]
    P, bs = len(prompt), case["block_size"]
    opts = NativeOptions(dtype=dtype, max_slots=2, max_tokens=512, max_budget=tree.n, prefill_chunk=PREFILL_CHUNK)
    out = {}
    with NativeEngine(tdir, ddir, opts, variant=variant) as eng:
        out["prefill_logits"], out["prefill_features"] = eng.prefill(0, prompt, hidden=True)
        assert eng.slot_lengths(0) == (P, P)
        lg, hd = eng.forward(0, [[token]], [[P]], hidden=True)
        out["decode_logits"], out["decode_features"] = lg[0, 0], hd[0, 0]
        # the drafter's context: the prompt (fed by the prefill) + the decoded token
        out["drafter_logits"] = eng.draft(0, [bonus], bs, ctx_features=hd.reshape(1, 1, -1), ctx_count=[1])[0]
        past = P + 1
        lt, ht = eng.forward(0, tree.tokens[None], tree.positions(past)[None], visibility_packed(tree)[None],
                             commit=False, hidden=True)
        out["verify_logits"], out["verify_features"] = lt[0], ht[0]
        eng.keep(0, path)
        assert eng.slot_lengths(0)[0] == past + len(path)
        out["after_keep_logits"] = eng.forward(0, [[token]], [[past + len(path)]])[0][0, 0]
    return out


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("pair", ["demo", "demo_int4", "no_q_lora_groups", "kimi_like"])
def test_native_matches_torch_reference(pair, dtype, pairs, native_variant, torch_device, rng):
    tdir, ddir = pairs[pair]
    vocab = load_target(tdir).cfg.vocab_size
    block = load_drafter(ddir, load_target(tdir)).block_size
    tree = random_tree(rng, vocab, TREE_NODES, depth=block - 1)
    case = {"prompt": rng.integers(0, vocab, PREFILL_TOKENS).tolist(), "token": int(rng.integers(vocab)),
            "bonus": int(rng.integers(vocab)), "tree": tree, "path": keep_path(tree), "block_size": block}
    ref32 = torch_run(tdir, ddir, torch.float32, torch_device, case)
    native = native_run(tdir, ddir, dtype, native_variant, case)
    err = {k: rel(native[k], ref32[k]) for k in ref32}
    if dtype == "float32":
        limit = {k: F32_TOL for k in err}
    else:
        ref16 = torch_run(tdir, ddir, torch.bfloat16, torch_device, case)
        torch_err = {k: rel(ref16[k], ref32[k]) for k in ref32}
        # the scale of bf16 noise on this input: the largest difference torch's own bf16 run shows
        noise = max(v for v in torch_err.values() if v != float("inf"))
        limit = {k: max(BF16_TOL, BF16_SLACK * noise) for k in err}
        print(f"{pair}/bf16, torch bf16 vs float32: " + ", ".join(f"{k} {v:.2e}" for k, v in torch_err.items()))
        record(test="forward_parity_torch_bf16", pair=pair, **torch_err)
    record(test="forward_parity", pair=pair, dtype=dtype, variant=native_variant, prefill=len(case["prompt"]),
           tree_nodes=TREE_NODES, kept=len(case["path"]), **err)
    print(f"{pair}/{dtype}, native vs float32: " + ", ".join(f"{k} {v:.2e}" for k, v in err.items()))
    bad = {k: (round(v, 5), round(limit[k], 5)) for k, v in err.items() if not v <= limit[k]}
    if dtype == "float32":
        assert not bad, f"relative errors over their limits (error, limit): {bad}"
    else:
        far = {k: v for k, v in bad.items() if not err[k] <= ROUTING_FLIP_SLACK * limit[k]}
        steps = {step_of(k) for k in bad}
        assert len(steps) <= 1 and not far, f"relative errors over their limits (error, limit): {bad}"
