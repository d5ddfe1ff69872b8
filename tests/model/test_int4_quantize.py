"""`kdtree quantize`: the round trip (quantize -> load -> dequantize) equals an independent
numpy quantization, the output is read by the compressed-tensors package and transformers,
the Kimi layout works, and DST is either complete or untouched whatever goes wrong."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from hf_oracle import hf_model, rel_err
from test_int4_format import np_dequantize, np_quantize

from python_engine.errors import KdtreeError
from python_engine.model.int4_quantize import quantize_checkpoint
from python_engine.model.synthetic_checkpoint import write_random_target
from python_engine.model.target_loader import load_target

pytest.importorskip("compressed_tensors")
from int4_oracle import INT4_CONFIG, package_config, package_dequantize, read_dir  # noqa: E402

WEIGHT_SEED = 43
MOE_LAYERS = range(INT4_CONFIG["first_k_dense_replace"], INT4_CONFIG["num_hidden_layers"])


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    d = write_random_target(tmp_path_factory.mktemp("q") / f"bf16-seed{WEIGHT_SEED}", INT4_CONFIG,
                            seed=WEIGHT_SEED, shards=3, dtype=torch.bfloat16)
    (d / "tokenizer.json").write_text('{"model": "stand-in"}')
    (d / "generation_config.json").write_text('{"bos_token_id": 0}')
    return d


@pytest.fixture(scope="module")
def quantized(src, tmp_path_factory):
    dst = tmp_path_factory.mktemp("out") / "int4"
    summary = quantize_checkpoint(src, dst, shard_bytes=40_000)
    assert summary.quantized == 3 * INT4_CONFIG["n_routed_experts"] * len(MOE_LAYERS) and summary.shards > 2
    return dst


def test_round_trip_equals_an_independent_numpy_quantization(src, quantized):
    source, ours = read_dir(src), load_target(quantized, dtype=torch.bfloat16)
    for i in MOE_LAYERS:
        for proj in ("gate", "up", "down"):
            for e in range(INT4_CONFIG["n_routed_experts"]):
                w = source[f"model.layers.{i}.mlp.experts.{e}.{proj}_proj.weight"].float().numpy()
                expected = np_dequantize(*np_quantize(w))
                got = getattr(ours.w.layers[i].moe, proj)[e].float().numpy()
                assert np.array_equal(got, expected), (i, proj, e)
    # everything but the routed experts is copied bit for bit, with its dtype
    stored = read_dir(quantized)
    for name, t in source.items():
        if ".mlp.experts." not in name:
            assert stored[name].dtype == t.dtype and torch.equal(stored[name], t), name


def test_output_files_config_and_shards(src, quantized):
    cfg = json.loads((quantized / "config.json").read_text())
    source_cfg = json.loads((src / "config.json").read_text())
    assert {k: v for k, v in cfg.items() if k != "quantization_config"} == source_cfg
    for name in ("tokenizer.json", "generation_config.json"):
        assert (quantized / name).read_bytes() == (src / name).read_bytes()
    index = json.loads((quantized / "model.safetensors.index.json").read_text())
    shards = sorted(quantized.glob("*.safetensors"))
    n = len(shards)
    assert [s.name for s in shards] == [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]
    assert set(index["weight_map"].values()) == {s.name for s in shards}
    assert set(index["weight_map"]) == set(read_dir(quantized))
    header_room = 16_384  # the safetensors JSON header is not counted by --shard-size
    assert all(s.stat().st_size <= 40_000 + header_room for s in shards[:-1])
    assert not [p for p in quantized.parent.iterdir() if p.name.startswith(".")]  # no temp folder left


def test_the_package_reads_the_output(quantized):
    """compressed-tensors accepts our config and dequantizes our tensors to our weights."""
    from compressed_tensors.quantization import QuantizationConfig

    cfg = json.loads((quantized / "config.json").read_text())
    parsed = QuantizationConfig.model_validate(cfg["quantization_config"])
    assert parsed.format == "pack-quantized" and parsed.config_groups["group_0"].weights.group_size == 32
    assert parsed.model_dump(mode="json")["ignore"] == package_config()["ignore"]
    ref = package_dequantize(quantized)  # it also refuses packed tensors it could not place
    ours = load_target(quantized, dtype=torch.bfloat16)
    for i in MOE_LAYERS:
        for e in range(INT4_CONFIG["n_routed_experts"]):
            assert torch.equal(ours.w.layers[i].moe.down[e], ref[f"model.layers.{i}.mlp.experts.{e}.down_proj.weight"])


def test_transformers_reads_the_output_to_our_logits(quantized, seed):
    hf, ours = hf_model(quantized), load_target(quantized)
    # transformers keeps the decompressed experts in bf16 whatever the dtype, and refuses
    # .float() on a quantized model: lift them to float32 in place (bf16 -> float32 is exact)
    for p in hf.parameters():
        p.data = p.data.float()
    ids = torch.randint(0, INT4_CONFIG["vocab_size"], (16,), generator=torch.Generator().manual_seed(seed)).tolist()
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    out = ours.forward(ids, torch.arange(16), ours.new_cache()).logits
    assert rel_err(out, ref) <= 1e-5


def test_kimi_layout_quantizes_to_the_same_weights(quantized, tmp_path):
    kimi = write_random_target(tmp_path / "kimi", INT4_CONFIG, seed=WEIGHT_SEED, shards=2, kimi_layout=True,
                               dtype=torch.bfloat16)
    quantize_checkpoint(kimi, tmp_path / "kimi-int4")
    stored = read_dir(tmp_path / "kimi-int4")
    assert "language_model.model.layers.1.mlp.experts.0.up_proj.weight_packed" in stored
    a, b = load_target(quantized), load_target(tmp_path / "kimi-int4")
    for i in MOE_LAYERS:
        assert torch.equal(a.w.layers[i].moe.gate, b.w.layers[i].moe.gate)
    ref = package_dequantize(tmp_path / "kimi-int4")
    assert torch.equal(b.w.layers[2].moe.up[5].to(torch.bfloat16),
                       ref["language_model.model.layers.2.mlp.experts.5.up_proj.weight"])
    # lm_head under its prefixed name, and everything outside the language model left alone
    ignore = json.loads((tmp_path / "kimi-int4" / "config.json").read_text())["quantization_config"]["ignore"]
    assert ignore[0] == "language_model.lm_head" and ignore[-1] == "re:(?!language_model\\.)"


def kdtree(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kdtree_cli", "quantize", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def test_cli_refuses_to_overwrite_without_force_and_replaces_with_it(src, tmp_path):
    dst = tmp_path / "out"
    dst.mkdir()
    (dst / "keep.txt").write_text("mine")
    proc = kdtree(src, dst)
    assert proc.returncode == 1 and f"destination {dst} exists; pass --force" in proc.stderr
    assert "Traceback" not in proc.stderr and (dst / "keep.txt").read_text() == "mine"
    proc = kdtree(src, dst, "--force", "--shard-size", 1)
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {dst}: 48 routed expert weights in INT4" in proc.stdout
    assert not (dst / "keep.txt").exists() and load_target(dst).cfg.quantization is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temp or old folder left


def test_a_failure_leaves_no_half_written_destination(src, tmp_path):
    from safetensors.torch import load_file, save_file

    bad = tmp_path / "bad"
    bad.mkdir()
    for f in src.iterdir():
        bad.joinpath(f.name).write_bytes(f.read_bytes())
    shard = sorted(bad.glob("model-*.safetensors"))[-1]  # the last shard: earlier ones are written first
    tensors = load_file(str(shard))
    name = next(k for k in sorted(tensors) if ".mlp.experts." in k)
    tensors[name][0, 0] = float("nan")
    save_file(tensors, str(shard), metadata={"format": "pt"})

    with pytest.raises(KdtreeError, match=rf"{shard.name}: tensor '{name}' holds NaN or Inf"):
        quantize_checkpoint(bad, tmp_path / "new")
    assert not (tmp_path / "new").exists()
    old = tmp_path / "old"  # with --force, the old destination survives a failure
    old.mkdir()
    (old / "keep.txt").write_text("mine")
    with pytest.raises(KdtreeError, match="NaN or Inf"):
        quantize_checkpoint(bad, old, force=True)
    assert (old / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad", "old"]


def test_bad_sources_and_destinations_are_refused(src, quantized, tmp_path):
    with pytest.raises(KdtreeError, match="already declares a compressed-tensors quantization_config"):
        quantize_checkpoint(quantized, tmp_path / "again")
    with pytest.raises(KdtreeError, match="overlaps the source"):
        quantize_checkpoint(src, src / "inside")
    with pytest.raises(KdtreeError, match="does not exist"):
        quantize_checkpoint(tmp_path / "absent", tmp_path / "x")
    (tmp_path / "file").write_text("")
    with pytest.raises(KdtreeError, match="exists and is not a folder"):
        quantize_checkpoint(src, tmp_path / "file", force=True)
    odd = write_random_target(tmp_path / "odd", dict(INT4_CONFIG, moe_intermediate_size=48), seed=1)
    with pytest.raises(KdtreeError, match="moe_intermediate_size = 48 is not a multiple of the INT4 group size 32"):
        quantize_checkpoint(odd, tmp_path / "y")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
