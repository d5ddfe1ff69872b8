"""A tree verify (one forward over root + n nodes with the ancestor mask over the latent
cache) gives every node the logits transformers computes for the node's path, and after
compaction the cache continues exactly as if only the accepted path had been decoded."""

from __future__ import annotations

import torch
from hf_oracle import hf_model, rel_err

from python_engine.ddtree import build_tree, compaction_indices, topk_logprobs, visibility_dense
from python_engine.model.target_loader import load_target


def path_to(tree, i: int) -> list[int]:
    nodes = []
    while i > 0:
        nodes.append(i)
        i = int(tree.parent[i])
    return [int(tree.tokens[j]) for j in reversed(nodes)]


def test_tree_verify_and_compaction_match_transformers(parity_dirs, seed):
    model_dir = parity_dirs["yarn"]
    ours, hf = load_target(model_dir), hf_model(model_dir)
    g = torch.Generator().manual_seed(seed)
    V = ours.cfg.vocab_size
    prompt = torch.randint(0, V, (11,), generator=g).tolist()
    root = int(torch.randint(0, V, (1,), generator=g))
    draft = torch.randn(4, V, generator=g) * 2
    draft[torch.arange(4), torch.randint(0, V, (4,), generator=g)] += 12  # a confident chain: depth
    logp, tok = topk_logprobs(draft.numpy(), 12)
    tree = build_tree(logp, tok, 12, root_token=root)
    assert tree.max_depth >= 3 and tree.n == 12

    cache = ours.new_cache()
    ours.forward(prompt, torch.arange(11), cache)
    past = cache.length
    vis = torch.ones(tree.n + 1, past + tree.n + 1, dtype=torch.bool)
    vis[:, past:] = torch.from_numpy(visibility_dense(tree))
    logits = ours.forward(tree.tokens, tree.positions(past), cache, vis).logits

    with torch.no_grad():
        for i in range(tree.n + 1):
            seq = prompt + [root] + path_to(tree, i)
            ref = hf(torch.tensor([seq])).logits[0, -1]
            assert rel_err(logits[i], ref) <= 1e-5, f"node {i}"

    # accept a path whose node indices are not contiguous, so compaction really moves rows
    def accepted_path(i):
        path = []
        while i > 0:
            path.append(i)
            i = int(tree.parent[i])
        return [0] + path[::-1]

    chosen = max((i for i in range(1, tree.n + 1) if accepted_path(i) != list(range(len(accepted_path(i))))),
                 key=lambda i: int(tree.depth[i]))
    accepted = accepted_path(chosen)
    src, dst = compaction_indices(past, accepted)
    cache.compact(src, dst)
    assert cache.length == past + len(accepted)
    nxt = int(torch.randint(0, V, (1,), generator=g))
    step = ours.forward([nxt], [cache.length], cache).logits[0]
    with torch.no_grad():
        ref = hf(torch.tensor([prompt + [root] + path_to(tree, chosen) + [nxt]])).logits[0, -1]
    assert rel_err(step, ref) <= 1e-5
