"""Model-level reference bundles for the native engine's tests (generator name "model").

One tiny DeepSeek-V3-shaped target (q LoRA, MoE with n_group 4 / topk_group 2, shared
expert, interleaved YaRN RoPE) and a random 2-layer DFlash drafter, from fixed seeds.
References are computed by the torch engine in float64 from the stored weights and rounded
once to float32, so the bytes do not depend on the CPU's float32 kernels (`kdtree refs
--check` compares bytes). Schema (ints are int64 unless said; "cfg.*" are int64[1] or
float64[1] scalars, "config_json" is the config.json text as uint8):

model_target_f32.kdtr / model_target_bf16.kdtr (same model; weights f32 / bf16, every
reference computed from the weights as stored in that bundle):
  config_json, cfg.*; w.<checkpoint tensor name> (DeepSeek-V3 names)
  prefill.tokens [T], prefill.positions [T]
  prefill.hidden.{i} f32[T, H]     residual stream after decoder layer i (for the last
                                   layer: before the final norm, unlike transformers)
  prefill.{i}.attn_out / ffn_in / ffn_out f32[T, H]; prefill.{i}.router_experts [T, k],
  prefill.{i}.router_weights f32[T, k] (MoE layers; experts sorted ascending per token)
  prefill.logits f32[T, V]; prefill.cache f32[L, T, kv_lora + rope] (c, then k_pe after
  RoPE in transformers' de-interleaved output layout)
  decode.tokens [S], decode.positions [S], decode.logits f32[S, V] (one token per forward
  after the prefill), decode.cache f32[L, T+S, kv_lora + rope]
  verify.tokens [n+1], verify.positions [n+1] (root at T+S, nodes at T+S+depth),
  verify.parent int32[n+1], verify.visibility uint8[n+1, n+1] (ancestor-or-self), and
  verify.logits f32[n+1, V]: a tree verify over the decode cache.

model_ddtree_trace.kdtr (f32 weights; the same target plus the drafter):
  config_json, drafter_config_json, w.<target tensors>, d.<drafter tensors>
  block_size, budget, prompt [P]; then for each trace g (greedy, T = 0) and s (T = 1,
  the recorded choices stand in for the sampler): {g,s}.tokens [generated], {g,s}.rounds,
  {g,s}.prefill_logits f32[V] (last prompt row), and per round r:
  {g,s}.r{r}.start (root position = cache length before the verify),
  .ctx_features f32[c, F] (the drafter's new context this round: the prompt's in round 0,
  else the previous round's accepted nodes), .draft_logits f32[D, V], .logp f32[D, K],
  .tok [D, K], .tree_tokens/.tree_depth/.tree_parent [n+1] (int32 for depth/parent),
  .verify_logits f32[n+1, V], .choice [n+1], .accepted [m+1], .bonus [1], .src/.dst [m+1],
  .cache_rows f32[L, m+1, kv_lora + rope]: the cache rows start..start+m after compaction
  (rows before start are unchanged by the round); {g,s}.cache_final f32[L, len, ...].
  g.ar_tokens: the AR greedy tokens (equal to g.tokens). The prompt is the one of 8 seeded
  candidates with the longest mean greedy acceptance, so multi-node accepts appear.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import torch

from python_engine.ddtree import build_tree, topk_logprobs, visibility_dense
from python_engine.decode.ar import ar_generate
from python_engine.decode.ddtree_loop import ddtree_generate
from python_engine.kdtr import write_kdtr
from python_engine.model.drafter import load_drafter
from python_engine.model.synthetic_checkpoint import (random_drafter_config, random_drafter_tensors, random_target_tensors,
                                                      save_safetensors_dir, tiny_config)
from python_engine.model.target_loader import load_target

TARGET_SEED, DRAFTER_SEED, INPUT_SEED, SAMPLE_SEED = 20261130, 20261131, 20261132, 20261133
REFS_CONFIG = tiny_config(
    vocab_size=16, hidden_size=32, intermediate_size=48, moe_intermediate_size=16,
    num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=2, kv_lora_rank=16, q_lora_rank=24,
    qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8, n_routed_experts=8, n_group=4, topk_group=2,
    num_experts_per_tok=2, max_position_embeddings=256,
    rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "beta_fast": 32,
                  "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 0.8},
)
PREFILL, DECODE, TRACE_TOKENS, BLOCK, BUDGET = 12, 4, 24, 4, 32


def _f32(t: torch.Tensor) -> np.ndarray:
    return t.detach().double().cpu().numpy().astype(np.float32)


def _config_entries(prefix: str, raw: dict, cfg) -> dict:
    out = {f"{prefix}config_json": np.frombuffer(json.dumps(raw, sort_keys=True).encode(), dtype=np.uint8)}
    for key, value in vars(cfg).items():
        if isinstance(value, bool):
            value = int(value)
        if isinstance(value, int):
            out[f"{prefix}cfg.{key}"] = np.array([value], dtype=np.int64)
        elif isinstance(value, float):
            out[f"{prefix}cfg.{key}"] = np.array([value], dtype=np.float64)
    return out


def _write_models(work: Path, weight_dtype: torch.dtype) -> tuple[Path, Path, dict, dict]:
    """Target and drafter checkpoints (weights as stored: f32 or bf16) in `work`."""
    tensors = {k: v.to(weight_dtype) for k, v in random_target_tensors(REFS_CONFIG, TARGET_SEED).items()}
    tdir = work / f"target-{str(weight_dtype)[6:]}"
    save_safetensors_dir(tdir, tensors)
    (tdir / "config.json").write_text(json.dumps(REFS_CONFIG))
    target_cfg = load_target(tdir).cfg
    dcfg = random_drafter_config(target_cfg, num_layers=2, block_size=BLOCK, num_heads=2, num_kv_heads=1, head_dim=16)
    dtensors = random_drafter_tensors(dcfg, DRAFTER_SEED)
    ddir = work / "drafter"
    save_safetensors_dir(ddir, dtensors)
    (ddir / "config.json").write_text(json.dumps(dcfg))
    return tdir, ddir, tensors, dtensors


def _target_bundle(path: Path, tdir: Path, tensors: dict) -> Path:
    target = load_target(tdir, dtype=torch.float64)
    cfg = target.cfg
    g = torch.Generator().manual_seed(INPUT_SEED)
    tokens = torch.randint(0, cfg.vocab_size, (PREFILL + DECODE,), generator=g)
    out = _config_entries("", REFS_CONFIG, cfg)
    out.update({f"w.{k}": v for k, v in tensors.items()})

    cache = target.new_cache()
    taps: dict = {}
    pre = target.forward(tokens[:PREFILL], torch.arange(PREFILL), cache,
                         hidden_layers=range(cfg.num_hidden_layers), taps=taps)
    out["prefill.tokens"], out["prefill.positions"] = tokens[:PREFILL].numpy(), np.arange(PREFILL)
    for i in range(cfg.num_hidden_layers):
        out[f"prefill.hidden.{i}"] = _f32(pre.hidden[i])
    for name, value in taps.items():
        if name.endswith("router_experts"):
            order = value.argsort(dim=-1)
            weights_name = name.replace("router_experts", "router_weights")
            out[f"prefill.{name}"] = value.gather(-1, order).numpy()
            out[f"prefill.{weights_name}"] = _f32(taps[weights_name].gather(-1, order))
        elif not name.endswith("router_weights"):
            out[f"prefill.{name}"] = _f32(value)
    out["prefill.logits"] = _f32(pre.logits)
    out["prefill.cache"] = _f32(cache.rows[:, :PREFILL])

    rows = [target.forward(tokens[i : i + 1], [i], cache).logits for i in range(PREFILL, PREFILL + DECODE)]
    out["decode.tokens"], out["decode.positions"] = tokens[PREFILL:].numpy(), np.arange(PREFILL, PREFILL + DECODE)
    out["decode.logits"] = _f32(torch.cat(rows))
    out["decode.cache"] = _f32(cache.rows[:, : cache.length])

    logp, tok = topk_logprobs((torch.randn(BLOCK - 1, cfg.vocab_size, generator=g) * 2).numpy(), 10)
    tree = build_tree(logp, tok, 10, root_token=int(tokens[-1]))
    past = cache.length
    vis = torch.ones(tree.n + 1, past + tree.n + 1, dtype=torch.bool)
    vis[:, past:] = torch.from_numpy(visibility_dense(tree))
    verify = target.forward(tree.tokens, tree.positions(past), cache, vis)
    out.update({"verify.tokens": tree.tokens, "verify.positions": tree.positions(past),
                "verify.parent": tree.parent.astype(np.int32),
                "verify.visibility": visibility_dense(tree).astype(np.uint8),
                "verify.logits": _f32(verify.logits)})
    return write_kdtr(path, out)


def _trace_entries(prefix: str, gen, prompt_logits: torch.Tensor, prompt_features: np.ndarray) -> dict:
    out = {f"{prefix}.tokens": np.array(gen.tokens, dtype=np.int64),
           f"{prefix}.rounds": np.array([len(gen.trace)], dtype=np.int64),
           f"{prefix}.prefill_logits": prompt_logits}
    ctx = prompt_features
    for r, t in enumerate(gen.trace):
        p = f"{prefix}.r{r}."
        out.update({
            p + "start": np.array([t["start"]], dtype=np.int64), p + "ctx_features": ctx,
            p + "draft_logits": t["draft_logits"].astype(np.float32), p + "logp": t["logp"], p + "tok": t["tok"],
            p + "tree_tokens": t["tree_tokens"], p + "tree_depth": t["tree_depth"].astype(np.int32),
            p + "tree_parent": t["tree_parent"].astype(np.int32),
            p + "verify_logits": t["verify_logits"].astype(np.float32), p + "choice": t["choice"],
            p + "accepted": t["accepted"], p + "bonus": np.array([t["bonus"]], dtype=np.int64),
            p + "src": t["src"], p + "dst": t["dst"],
            p + "cache_rows": t["cache_rows"][:, t["start"]:].astype(np.float32),
        })
        ctx = t["features"].astype(np.float32)
    out[f"{prefix}.cache_final"] = gen.trace[-1]["cache_rows"].astype(np.float32)
    return out


def _trace_bundle(path: Path, tdir: Path, ddir: Path, tensors: dict, dtensors: dict) -> Path:
    target = load_target(tdir, dtype=torch.float64)
    drafter = load_drafter(ddir, target)
    g = torch.Generator().manual_seed(INPUT_SEED + 1)
    candidates = [torch.randint(0, target.cfg.vocab_size, (10,), generator=g).tolist() for _ in range(8)]
    taus = [ddtree_generate(target, drafter, p, TRACE_TOKENS, BUDGET).tau for p in candidates]
    prompt = candidates[int(np.argmax(taus))]
    out = _config_entries("", REFS_CONFIG, target.cfg)
    out["drafter_config_json"] = np.frombuffer(
        (ddir / "config.json").read_bytes().decode().encode(), dtype=np.uint8)
    out.update({f"w.{k}": v for k, v in tensors.items()})
    out.update({f"d.{k}": v for k, v in dtensors.items()})
    out.update({"block_size": np.array([BLOCK]), "budget": np.array([BUDGET]), "prompt": np.array(prompt)})

    pre = target.forward(prompt, torch.arange(len(prompt)), target.new_cache(), hidden_layers=drafter.target_layer_ids)
    prompt_logits, prompt_features = _f32(pre.logits[-1]), _f32(pre.features(drafter.target_layer_ids))
    greedy = ddtree_generate(target, drafter, prompt, TRACE_TOKENS, BUDGET, trace=True)
    ar = ar_generate(target, prompt, TRACE_TOKENS)
    if greedy.tokens != ar.tokens:
        raise AssertionError("reference trace: DDTree greedy tokens differ from AR greedy tokens")
    out.update(_trace_entries("g", greedy, prompt_logits, prompt_features))
    out["g.ar_tokens"] = np.array(ar.tokens, dtype=np.int64)
    sampled = ddtree_generate(target, drafter, prompt, TRACE_TOKENS, BUDGET, temperature=1.0,
                              generator=torch.Generator().manual_seed(SAMPLE_SEED), trace=True)
    out.update(_trace_entries("s", sampled, prompt_logits, prompt_features))
    return write_kdtr(path, out)


def write_model_refs(out_dir: Path) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: threads only cost time
    try:
        with tempfile.TemporaryDirectory(prefix="kdtree-model-refs-") as tmp:
            work = Path(tmp)
            t32, ddir, w32, dw = _write_models(work, torch.float32)
            t16, _, w16, _ = _write_models(work, torch.bfloat16)
            return [
                _target_bundle(out_dir / "model_target_f32.kdtr", t32, w32),
                _target_bundle(out_dir / "model_target_bf16.kdtr", t16, w16),
                _trace_bundle(out_dir / "model_ddtree_trace.kdtr", t32, ddir, w32, dw),
            ]
    finally:
        torch.set_num_threads(threads)
