"""`kdtree bench load`: checkpoint load throughput and the engine's memory accounting, on a
random Kimi K2-shaped slice (real K2 widths: hidden 7168, 64 heads, MLA 1536/512/128/64,
vocab 163840; 3 layers, the MoE layers with 32 of the 384 experts), >= 10 GB of bf16
safetensors shards written by this command. In one run:
  - the native engine's load (its own reader: pinned staging, files in parallel) in GB/s,
    next to the same files read by `safetensors` into torch on the same GPU;
  - GPU memory used after create vs the engine's report (weights + caches + workspace);
  - two engines on the same checkpoint in one process, both freed, twice: the second cycle
    ends with exactly the free memory of the first (nothing left behind per load).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from python_engine.errors import KdtreeError

GB = 1e9
SHARD_BYTES = 4 << 30  # safetensors shards of at most 4 GiB, as the big checkpoints ship
KIMI_SLICE = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "vocab_size": 163840,
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 3,
    "num_attention_heads": 64, "num_key_value_heads": 64, "n_shared_experts": 1, "n_routed_experts": 32,
    "routed_scaling_factor": 2.827, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "qk_nope_head_dim": 128, "n_group": 1, "topk_group": 1, "num_experts_per_tok": 8,
    "first_k_dense_replace": 1, "norm_topk_prob": True, "hidden_act": "silu", "max_position_embeddings": 262144,
    "rms_norm_eps": 1e-5, "rope_theta": 50000.0, "tie_word_embeddings": False,
    "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096, "beta_fast": 1.0,
                     "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
    "bos_token_id": 163584, "eos_token_id": 163585, "torch_dtype": "bfloat16",
}


def _shapes(c: dict) -> dict[str, tuple[int, ...]]:
    H, V, nh = c["hidden_size"], c["vocab_size"], c["num_attention_heads"]
    qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    out = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,), "lm_head.weight": (V, H)}
    for i in range(c["num_hidden_layers"]):
        p, a, m = f"model.layers.{i}.", f"model.layers.{i}.self_attn.", f"model.layers.{i}.mlp."
        out.update({p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,),
                    a + "q_a_proj.weight": (c["q_lora_rank"], H), a + "q_a_layernorm.weight": (c["q_lora_rank"],),
                    a + "q_b_proj.weight": (nh * qk, c["q_lora_rank"]),
                    a + "kv_a_proj_with_mqa.weight": (c["kv_lora_rank"] + c["qk_rope_head_dim"], H),
                    a + "kv_a_layernorm.weight": (c["kv_lora_rank"],),
                    a + "kv_b_proj.weight": (nh * (c["qk_nope_head_dim"] + c["v_head_dim"]), c["kv_lora_rank"]),
                    a + "o_proj.weight": (H, nh * c["v_head_dim"])})
        if i < c["first_k_dense_replace"]:
            I = c["intermediate_size"]
            out.update({m + "gate_proj.weight": (I, H), m + "up_proj.weight": (I, H), m + "down_proj.weight": (H, I)})
            continue
        I, E = c["moe_intermediate_size"], c["n_routed_experts"]
        out.update({m + "gate.weight": (E, H), m + "gate.e_score_correction_bias": (E,),
                    m + "shared_experts.gate_proj.weight": (I, H), m + "shared_experts.up_proj.weight": (I, H),
                    m + "shared_experts.down_proj.weight": (H, I)})
        for e in range(E):
            x = f"{m}experts.{e}."
            out.update({x + "gate_proj.weight": (I, H), x + "up_proj.weight": (I, H), x + "down_proj.weight": (H, I)})
    return out


def write_kimi_slice(folder: Path, seed: int = 0) -> float:
    """Random bf16 weights (drawn on the GPU) in sharded safetensors; returns the bytes written."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(KIMI_SLICE, indent=2))
    g = torch.Generator(device="cuda").manual_seed(seed)
    shards, current, size, total = [], {}, 0, 0
    for name, shape in _shapes(KIMI_SLICE).items():
        dtype = torch.float32 if name.endswith("e_score_correction_bias") else torch.bfloat16
        t = (torch.randn(shape, generator=g, device="cuda") * 0.02).to(dtype)
        if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
            t = (1 + t).to(dtype)
        nbytes = t.numel() * t.element_size()
        if current and size + nbytes > SHARD_BYTES:
            shards.append(current)
            current, size = {}, 0
        current[name] = t.cpu()
        size += nbytes
        total += nbytes
    shards.append(current)
    weight_map = {}
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(folder / fname))
        weight_map.update({k: fname for k in shard})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total},
                                                                     "weight_map": weight_map}))
    return total


def run_load_bench(folder: Path, keep: bool = False, repeats: int = 2) -> dict:
    import torch
    from safetensors.torch import load_file

    from python_engine.engine_choice import native_unavailable
    from python_engine.native.engine import NativeEngine, NativeOptions, device_memory

    if not torch.cuda.is_available():
        raise KdtreeError("kdtree bench load needs a CUDA GPU (torch sees none here)")
    why_not = native_unavailable()
    if why_not:  # before the slice is written: the bench is the native engine's load
        raise KdtreeError(f"kdtree bench load times the native engine's load: {why_not}")
    t0 = time.perf_counter()
    total = write_kimi_slice(folder)
    write_s = time.perf_counter() - t0
    files = sorted(folder.glob("*.safetensors"))
    opts = NativeOptions(dtype="bfloat16", max_slots=1, max_tokens=256, max_budget=0)
    result: dict = {"checkpoint_bytes": total, "files": len(files), "write_s": write_s, "native": [], "torch": []}
    for _ in range(repeats):  # alternate, so neither reader always meets a warmer page cache
        t = time.perf_counter()
        with NativeEngine(folder, None, opts, variant="gpu") as eng:
            create_s = time.perf_counter() - t
            mem = eng.memory()
        result["native"].append({"create_s": create_s, "load_s": mem["load_us"] / 1e6,
                                 "gb_per_s": total / GB / (mem["load_us"] / 1e6)})
        torch.cuda.synchronize()
        t = time.perf_counter()
        tensors = [load_file(str(f), device="cuda:0") for f in files]
        torch.cuda.synchronize()
        secs = time.perf_counter() - t
        result["torch"].append({"load_s": secs, "gb_per_s": total / GB / secs})
        del tensors
        torch.cuda.empty_cache()
    # memory: used after create vs the report; then two engines created and freed, twice: the
    # second cycle must end where the first did (the first may leave the CUDA context or
    # cuBLAS a one-time allocation; a leak would repeat every cycle)
    torch.cuda.empty_cache()
    free0, _ = device_memory(0)
    e1 = NativeEngine(folder, None, opts, variant="gpu")
    free1, _ = device_memory(0)
    report = e1.memory()
    cycle_ends = []
    for cycle in range(2):
        e2 = NativeEngine(folder, None, opts, variant="gpu")
        e1.close()
        e2.close()
        cycle_ends.append(device_memory(0)[0])
        if cycle == 0:
            e1 = NativeEngine(folder, None, opts, variant="gpu")
    used = free0 - free1
    result["memory"] = {"used_after_create": used, "reported_total": report["total"],
                        "ratio": used / report["total"], "weights": report["weights"],
                        "target_cache": report["target_cache"], "workspace": report["workspace"],
                        "free_before": free0, "free_after_cycle1": cycle_ends[0], "free_after_cycle2": cycle_ends[1],
                        "first_cycle_growth": free0 - cycle_ends[0], "left_behind": cycle_ends[0] - cycle_ends[1]}
    result["native_gb_per_s"] = max(r["gb_per_s"] for r in result["native"])
    result["torch_gb_per_s"] = max(r["gb_per_s"] for r in result["torch"])
    if not keep:
        shutil.rmtree(folder, ignore_errors=True)
    return result
