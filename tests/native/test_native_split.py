"""A model split over N parts (tensor-parallel attention and dense MLPs, expert-parallel routed
experts, lm_head split by vocabulary) against the same model whole, on one device: the parts
of a simulated group run one after another, each from its own thread, and are reduced in rank
order (KD_COMM_SIMULATED), through the same code path the NCCL ranks take.

float32: every output of the forwards (prefill, cached decode, a tree verify, after keeping a
path, the drafter's logits, the context features) within 1e-5 relative of the whole model,
identical on every part; DDTree decoding through the request loop (the round with its
collectives) gives the whole model's tokens, token for token."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from native_cases import DEMO_DRAFTER, DEMO_TARGET, random_pair, rel
from native_sizes import GPU, PREFILL_TOKENS, TREE_NODES
from test_native_forward import keep_path, native_run, random_tree

from python_engine.ddtree import visibility_packed
from python_engine.model.drafter import load_drafter
from python_engine.model.synthetic_checkpoint import tiny_config, write_random_drafter, write_random_target
from python_engine.model.target_loader import load_target
from python_engine.native import library as L
from python_engine.native.engine import NativeEngine, NativeOptions

SPLIT_TOL = 1e-5  # float32: only the order of the sums differs from the whole model
PREFILL_CHUNK = 64
DECODE_PROMPTS, DECODE_TOKENS, DECODE_BUDGET = 2, 12, 16


def run_parts(engines: list[NativeEngine], fn) -> list:
    """fn(engine) on every part, each in its own thread (the group takes them in turn)."""
    results: list = [None] * len(engines)
    errors: list = [None] * len(engines)

    def work(i: int) -> None:
        try:
            results[i] = fn(engines[i])
        except BaseException as exc:  # re-raised below, on the test's thread
            errors[i] = exc

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(engines))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not any(t.is_alive() for t in threads), "a part did not finish: the group deadlocked"
    for e in errors:
        if e is not None:
            raise e
    return results


class SplitModel:
    """`world` parts of one checkpoint in a simulated group (closes engines, then the group)."""

    def __init__(self, tdir, ddir, world: int, variant: str, **opts):
        self.group = L.SimGroup(world, variant)
        self.engines = []
        try:
            for r in range(world):
                o = NativeOptions(world_size=world, rank=r, comm="simulated", sim_group=self.group, **opts)
                self.engines.append(NativeEngine(tdir, ddir, o, variant=variant))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for e in self.engines:
            e.close()
        self.group.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# eight heads, experts, vocabulary and MLP columns that divide by 8: the user's box's split
EIGHT_WAY = tiny_config(num_attention_heads=8, num_key_value_heads=8, n_routed_experts=16, num_experts_per_tok=2,
                        n_group=1, topk_group=1, intermediate_size=96, moe_intermediate_size=16, vocab_size=128)


@pytest.fixture(scope="module")
def split_pairs(tmp_path_factory):
    root = tmp_path_factory.mktemp("split-pairs")
    tdir = write_random_target(root / "eight-way-target", EIGHT_WAY, seed=305)
    ddir = write_random_drafter(root / "eight-way-drafter", load_target(tdir).cfg, seed=306, num_layers=1, block_size=6)
    return {"demo": (DEMO_TARGET, DEMO_DRAFTER),
            "no_q_lora_groups": random_pair(root, "no_q_lora_groups", seed=301),
            "kimi_like": random_pair(root, "kimi_like", seed=303),
            "eight_way": (tdir, ddir)}


def split_forwards(tdir, ddir, world, variant, case) -> list[dict[str, np.ndarray]]:
    """native_run's calls on every part of a split model."""
    prompt, token, bonus, tree, path = case["prompt"], case["token"], case["bonus"], case["tree"], case["path"]
    P = len(prompt)
    opts = dict(dtype="float32", max_slots=2, max_tokens=512, max_budget=tree.n, prefill_chunk=PREFILL_CHUNK)

    def one(eng: NativeEngine) -> dict[str, np.ndarray]:
        out = {}
        out["prefill_logits"], out["prefill_features"] = eng.prefill(0, prompt, hidden=True)
        lg, hd = eng.forward(0, [[token]], [[P]], hidden=True)
        out["decode_logits"], out["decode_features"] = lg[0, 0], hd[0, 0]
        out["drafter_logits"] = eng.draft(0, [bonus], case["block_size"], ctx_features=hd.reshape(1, 1, -1),
                                          ctx_count=[1])[0]
        past = P + 1
        lt, ht = eng.forward(0, tree.tokens[None], tree.positions(past)[None], visibility_packed(tree)[None],
                             commit=False, hidden=True)
        out["verify_logits"], out["verify_features"] = lt[0], ht[0]
        eng.keep(0, path)
        out["after_keep_logits"] = eng.forward(0, [[token]], [[past + len(path)]])[0][0, 0]
        return out

    with SplitModel(tdir, ddir, world, variant, **opts) as model:
        return run_parts(model.engines, one)


@pytest.mark.parametrize("pair,world", [("demo", 2), ("demo", 4), ("no_q_lora_groups", 2), ("kimi_like", 2),
                                        ("eight_way", 8)])
def test_split_forwards_equal_the_whole_model(pair, world, split_pairs, native_variant, rng):
    tdir, ddir = split_pairs[pair]
    vocab = load_target(tdir).cfg.vocab_size
    block = load_drafter(ddir, load_target(tdir)).block_size
    tree = random_tree(rng, vocab, 24, depth=block - 1)
    case = {"prompt": rng.integers(0, vocab, 70).tolist(), "token": int(rng.integers(vocab)),
            "bonus": int(rng.integers(vocab)), "tree": tree, "path": keep_path(tree), "block_size": block}
    whole = native_run(tdir, ddir, "float32", native_variant, case)
    parts = split_forwards(tdir, ddir, world, native_variant, case)
    for r, part in enumerate(parts[1:], start=1):
        for k in whole:  # every part holds the same reduced and gathered values
            assert np.array_equal(part[k], parts[0][k]), f"part {r}'s {k} differs from part 0's"
    err = {k: rel(parts[0][k], whole[k]) for k in whole}
    print(f"{pair} split {world} ways vs whole: " + ", ".join(f"{k} {v:.1e}" for k, v in err.items()))
    bad = {k: v for k, v in err.items() if not v <= SPLIT_TOL}
    assert not bad, f"split outputs over {SPLIT_TOL} from the whole model: {bad}"


@pytest.mark.skipif(not GPU, reason="real Kimi K2 widths: a 12 GB checkpoint, for the GPU run")
def test_split_kimi_slice_equals_the_whole_model(tmp_path_factory, native_variant, rng):
    """The model `kdtree bench gpus` splits over two GPUs (hidden 7168, 64 heads, MLA
    1536/512/128/64, vocab 163840, 3 layers, 32 experts), split 2, 4 and 8 ways on one GPU
    (8: the user's box's split of Kimi K2.6)."""
    from kdtree_cli.bench.load import write_kimi_slice
    from python_engine.model.config import load_target_config
    from python_engine.model.synthetic_checkpoint import write_random_drafter

    root = tmp_path_factory.mktemp("kimi-split")
    tdir, ddir = root / "target", root / "drafter"
    write_kimi_slice(tdir, seed=int(rng.integers(1 << 30)))
    cfg = load_target_config(tdir)
    write_random_drafter(ddir, cfg, seed=int(rng.integers(1 << 30)), num_layers=1, block_size=8, num_heads=32,
                         num_kv_heads=8, head_dim=128, intermediate_size=4096)
    tree = random_tree(rng, cfg.vocab_size, TREE_NODES, depth=7)
    case = {"prompt": rng.integers(0, cfg.vocab_size, PREFILL_TOKENS).tolist(), "token": int(rng.integers(cfg.vocab_size)),
            "bonus": int(rng.integers(cfg.vocab_size)), "tree": tree, "path": keep_path(tree), "block_size": 8}
    whole = native_run(tdir, ddir, "float32", native_variant, case)
    for world in (2, 4, 8):
        parts = split_forwards(tdir, ddir, world, native_variant, case)
        assert all(np.array_equal(p[k], parts[0][k]) for p in parts for k in whole), "the parts differ"
        err = {k: rel(parts[0][k], whole[k]) for k in whole}
        print(f"kimi slice split {world} ways vs whole: " + ", ".join(f"{k} {v:.1e}" for k, v in err.items()))
        bad = {k: v for k, v in err.items() if not v <= SPLIT_TOL}
        assert not bad, f"{world} parts: outputs over {SPLIT_TOL} from the whole model: {bad}"


def decode_all(eng: NativeEngine, prompts, ar: bool) -> tuple[list[list[int]], int, list]:
    """Tokens per request, the collectives run, and every step's sampled tree."""
    ids = [eng.submit(p, DECODE_TOKENS, budget=0 if ar else DECODE_BUDGET, ar=ar) for p in prompts]
    collectives, trees = 0, []
    while True:
        rep = eng.step(want_tree=not ar)
        collectives += rep.collectives
        trees.append(rep.tree and {k: rep.tree[k] for k in ("parent", "token", "accepted")})
        if rep.rounds == 0 and rep.waiting == 0 and rep.running == 0:
            break
    out = [eng.request(i).tokens for i in ids]
    for i in ids:
        eng.release(i)
    return out, collectives, trees


@pytest.mark.parametrize("pair,world,overlap", [("demo", 2, False), ("demo", 2, True), ("kimi_like", 2, False),
                                                ("eight_way", 8, False)])
def test_split_ddtree_decoding_equals_the_whole_model(pair, world, overlap, split_pairs, native_variant, rng):
    tdir, ddir = split_pairs[pair]
    vocab = load_target(tdir).cfg.vocab_size
    prompts = [rng.integers(0, vocab, int(rng.integers(5, 20))).tolist() for _ in range(DECODE_PROMPTS)]
    opts = dict(dtype="float32", max_slots=DECODE_PROMPTS, max_tokens=64, max_budget=DECODE_BUDGET)
    with NativeEngine(tdir, ddir, NativeOptions(**opts), variant=native_variant) as eng:
        whole_ar, none, _ = decode_all(eng, prompts, ar=True)
        whole_tree, _, whole_trees = decode_all(eng, prompts, ar=False)
    assert none == 0, "one GPU runs no collectives"
    assert whole_tree == whole_ar, "the whole model's DDTree output differs from its AR output"
    with SplitModel(tdir, ddir, world, native_variant, overlap=overlap, **opts) as model:
        parts = run_parts(model.engines, lambda e: decode_all(e, prompts, ar=False))
    for r, (tokens, collectives, trees) in enumerate(parts):
        assert tokens == whole_tree, f"part {r}'s DDTree tokens differ from the whole model's"
        assert collectives > 0, "a split round reports its collectives"
        # the drafter's top-K merged from the parts builds the whole model's trees
        assert trees == whole_trees, f"part {r}'s trees differ from the whole model's"


def test_split_rejects_what_does_not_divide(split_pairs, native_variant):
    tdir, ddir = split_pairs["kimi_like"]  # 2 attention heads
    with pytest.raises(L.NativeError, match="num_attention_heads .*divisible by 4"):
        SplitModel(tdir, ddir, 4, native_variant, dtype="float32", max_slots=1, max_tokens=32, max_budget=4)


def test_split_options_are_checked(native_variant):
    # (world_size 2 with comm none is one rank's share: test_native_rank_share.py)
    with pytest.raises(L.NativeError, match="rank 2 outside 0..1"):
        NativeEngine(DEMO_TARGET, None, NativeOptions(dtype="float32", max_slots=1, max_tokens=32, world_size=2,
                                                      rank=2), variant=native_variant)
    with pytest.raises(L.NativeError, match="world_size 9 over 8"):
        NativeEngine(DEMO_TARGET, None, NativeOptions(dtype="float32", max_slots=1, max_tokens=32, world_size=9),
                     variant=native_variant)
    with L.SimGroup(2, native_variant) as group, pytest.raises(L.NativeError, match="simulated group has 2 parts"):
        NativeEngine(DEMO_TARGET, None, NativeOptions(dtype="float32", max_slots=1, max_tokens=32, world_size=3,
                                                      comm="simulated", sim_group=group), variant=native_variant)
    with pytest.raises(L.NativeError, match="world_size 9 outside|over 8"):
        L.SimGroup(9, native_variant)


def test_a_failing_part_stops_the_others_instead_of_hanging(native_variant):
    """Part 1 asks for a token outside the vocabulary while part 0 runs a good forward: part 1
    gets its own error, part 0 a clear one naming part 1 (not a wait until the timeout)."""
    with SplitModel(DEMO_TARGET, None, 2, native_variant, dtype="float32", max_slots=1, max_tokens=32,
                    collective_timeout_s=60) as model:
        def one(eng: NativeEngine):
            bad = eng.options.rank == 1
            try:
                eng.forward(0, [[10**6 if bad else 5]], [[0]])
            except L.NativeError as exc:
                return str(exc)
            return "ok"

        t0 = time.perf_counter()
        got = run_parts(model.engines, one)
        assert time.perf_counter() - t0 < 30, "the good part waited for the timeout"
    assert "outside the vocabulary" in got[1]
    assert "simulated group stopped: part 1 failed" in got[0]


@pytest.mark.parametrize("overlap", [True, False])
def test_split_batched_forward_equals_the_whole_model(overlap, split_pairs, native_variant, rng):
    """Three slots in one forward: with overlap the parts run the batch as two halves (one slot,
    two slots), each half's all-reduces beside the other half's compute; without, in line."""
    tdir, ddir = split_pairs["demo"]
    vocab = load_target(tdir).cfg.vocab_size
    prompts = [rng.integers(0, vocab, n).tolist() for n in (9, 14, 11)]
    tokens = rng.integers(0, vocab, (3, 4))
    opts = dict(dtype="float32", max_slots=3, max_tokens=64, max_budget=4)

    def calls(eng: NativeEngine):
        for slot, p in enumerate(prompts):
            eng.prefill(slot, p)
        positions = [[len(p) + j for j in range(tokens.shape[1])] for p in prompts]
        return eng.forward(0, tokens, positions, hidden=True)

    with NativeEngine(tdir, ddir, NativeOptions(**opts), variant=native_variant) as eng:
        whole = calls(eng)
    with SplitModel(tdir, ddir, 2, native_variant, overlap=overlap, **opts) as model:
        assert all(e.options.overlap == overlap for e in model.engines)
        parts = run_parts(model.engines, calls)
    for k, name in enumerate(("logits", "hidden")):
        assert np.array_equal(parts[1][k], parts[0][k]), f"the parts' {name} differ"
        err = rel(parts[0][k], whole[k])
        assert err <= SPLIT_TOL, f"{name}: {err:.2e} from the whole model (overlap {overlap})"
