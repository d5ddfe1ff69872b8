"""The model-level reference bundles: deterministic bytes, logits that agree with
transformers on the stored weights, and a DDTree trace that replays consistently."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hf_oracle import hf_model, rel_err

from python_engine.ddtree import Tree, accept_walk, topk_logprobs
from python_engine.kdtr import read_kdtr
from python_engine.model.synthetic_checkpoint import save_safetensors_dir
from python_engine.refgen.model_refs import write_model_refs


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    out = tmp_path_factory.mktemp("refs")
    paths = write_model_refs(out)
    return {p.name: p for p in paths}


def test_bundles_are_deterministic_and_small(bundles, tmp_path):
    again = {p.name: p for p in write_model_refs(tmp_path)}
    assert set(again) == {"model_target_f32.kdtr", "model_target_bf16.kdtr", "model_ddtree_trace.kdtr"}
    for name, path in bundles.items():
        assert path.read_bytes() == again[name].read_bytes(), name
    assert sum(p.stat().st_size for p in bundles.values()) < 2_000_000


@pytest.mark.parametrize("name", ["model_target_f32.kdtr", "model_target_bf16.kdtr"])
def test_target_bundle_agrees_with_transformers(bundles, name, tmp_path):
    b = read_kdtr(bundles[name])
    cfg = json.loads(bytes(b["config_json"]).decode())
    weights = {k[2:]: torch.from_numpy(v.copy()) for k, v in b.items() if k.startswith("w.")}
    if name.endswith("bf16.kdtr"):  # stored as bf16 bit patterns
        weights = {k: v.view(torch.bfloat16).float() for k, v in weights.items()}
    save_safetensors_dir(tmp_path, weights)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    hf = hf_model(tmp_path)
    tokens = np.concatenate([b["prefill.tokens"], b["decode.tokens"]])
    with torch.no_grad():
        ref = hf(torch.from_numpy(tokens)[None], output_hidden_states=True)
    T = len(b["prefill.tokens"])
    assert rel_err(torch.from_numpy(b["prefill.logits"]), ref.logits[0, :T]) <= 1e-5
    assert rel_err(torch.from_numpy(b["decode.logits"]), ref.logits[0, T:]) <= 1e-5
    for i in range(cfg["num_hidden_layers"] - 1):  # transformers' last entry is after the final norm
        assert rel_err(torch.from_numpy(b[f"prefill.hidden.{i}"]), ref.hidden_states[i + 1][0, :T]) <= 1e-5
    assert b["prefill.cache"].shape == (cfg["num_hidden_layers"], T, cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"])
    assert b["verify.visibility"].shape[0] == len(b["verify.tokens"]) == len(b["verify.logits"])


def test_trace_replays(bundles):
    b = read_kdtr(bundles["model_ddtree_trace.kdtr"])
    assert np.array_equal(b["g.tokens"], b["g.ar_tokens"])
    longest = 0
    for prefix in ("g", "s"):
        tokens = []
        for r in range(int(b[f"{prefix}.rounds"][0])):
            p = f"{prefix}.r{r}."
            logp, tok = topk_logprobs(b[p + "draft_logits"], int(b["budget"][0]))
            assert np.array_equal(logp, b[p + "logp"]) and np.array_equal(tok, b[p + "tok"])
            n = len(b[p + "tree_tokens"]) - 1
            tree = Tree(n, b[p + "tree_tokens"], b[p + "tree_depth"], b[p + "tree_parent"],
                        np.zeros(n + 1, np.float32), [()] * (n + 1))
            if prefix == "g":
                assert np.array_equal(b[p + "choice"], b[p + "verify_logits"].argmax(-1))
            accepted, bonus = accept_walk(tree, b[p + "choice"])
            assert accepted == b[p + "accepted"].tolist() and bonus == int(b[p + "bonus"][0])
            start = int(b[p + "start"][0])
            assert np.array_equal(b[p + "src"], start + np.array(accepted))
            assert b[p + "cache_rows"].shape[1] == len(accepted)
            tokens += [int(t) for t in b[p + "tree_tokens"][accepted[1:]]] + [bonus]
            longest = max(longest, len(accepted))
        first = int(b[f"{prefix}.prefill_logits"].argmax()) if prefix == "g" else int(b["s.tokens"][0])
        assert [first] + tokens[: len(b[f"{prefix}.tokens"]) - 1] == b[f"{prefix}.tokens"].tolist()
    assert longest >= 2
