"""Checkpoint loading: sharded and Kimi layouts read the same weights; broken checkpoints
and unsupported configs fail with a KdtreeError naming the file and the tensor or key."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from python_engine.errors import KdtreeError
from python_engine.model.config import config_from_dict
from python_engine.model.synthetic_checkpoint import tiny_config, write_random_target
from python_engine.model.target_loader import load_target

CFG = tiny_config(num_hidden_layers=2)


@pytest.fixture(scope="module")
def flat_dir(tmp_path_factory):
    return write_random_target(tmp_path_factory.mktemp("flat") / "m", CFG, seed=5)


@pytest.fixture(scope="module")
def sharded_dir(tmp_path_factory):
    return write_random_target(tmp_path_factory.mktemp("sharded") / "m", CFG, seed=5, shards=3)


def logits_of(model_dir, ids) -> torch.Tensor:
    m = load_target(model_dir)
    return m.forward(ids, torch.arange(len(ids)), m.new_cache()).logits


def test_sharded_and_kimi_layouts_load_the_same_weights(flat_dir, sharded_dir, tmp_path, seed):
    kimi = write_random_target(tmp_path / "kimi", CFG, seed=5, shards=2, kimi_layout=True)
    assert "text_config" in json.loads((kimi / "config.json").read_text())
    ids = torch.randint(0, CFG["vocab_size"], (9,), generator=torch.Generator().manual_seed(seed)).tolist()
    ref = logits_of(flat_dir, ids)
    assert torch.equal(logits_of(sharded_dir, ids), ref)
    assert torch.equal(logits_of(kimi, ids), ref)


def copy_of(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_missing_shard_names_the_file(sharded_dir, tmp_path):
    d = copy_of(sharded_dir, tmp_path / "m")
    (d / "model-00002-of-00003.safetensors").unlink()
    with pytest.raises(KdtreeError, match=r"model-00002-of-00003\.safetensors.* is missing"):
        load_target(d)


def test_bad_header_names_the_file(sharded_dir, tmp_path):
    d = copy_of(sharded_dir, tmp_path / "m")
    shard = d / "model-00001-of-00003.safetensors"
    blob = bytearray(shard.read_bytes())
    blob[8:20] = b"{not json!!!"  # the JSON header starts after the 8-byte length
    shard.write_bytes(bytes(blob))
    with pytest.raises(KdtreeError, match=r"model-00001-of-00003\.safetensors is not a readable safetensors"):
        load_target(d)


def test_truncated_file_names_the_file(flat_dir, tmp_path):
    d = copy_of(flat_dir, tmp_path / "m")
    f = d / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-100])
    with pytest.raises(KdtreeError, match=r"model\.safetensors"):
        load_target(d)


def test_wrong_shape_names_file_and_tensor(tmp_path):
    from safetensors.torch import load_file, save_file

    d = write_random_target(tmp_path / "m", CFG, seed=5)
    tensors = load_file(str(d / "model.safetensors"))
    name = "model.layers.1.self_attn.kv_b_proj.weight"
    tensors[name] = tensors[name][:-1]
    save_file(tensors, str(d / "model.safetensors"))
    with pytest.raises(KdtreeError, match=rf"model\.safetensors: tensor '{name}' has shape \["):
        load_target(d)


def test_missing_tensor_is_named(tmp_path):
    from safetensors.torch import load_file, save_file

    d = write_random_target(tmp_path / "m", CFG, seed=5)
    tensors = load_file(str(d / "model.safetensors"))
    del tensors["model.layers.1.mlp.experts.3.up_proj.weight"]
    save_file(tensors, str(d / "model.safetensors"))
    with pytest.raises(KdtreeError, match=r"'model\.layers\.1\.mlp\.experts\.3\.up_proj\.weight' is missing"):
        load_target(d)


def test_index_pointing_at_absent_tensor(sharded_dir, tmp_path):
    d = copy_of(sharded_dir, tmp_path / "m")
    index = json.loads((d / "model.safetensors.index.json").read_text())
    name = next(k for k, v in index["weight_map"].items() if v == "model-00001-of-00003.safetensors")
    index["weight_map"][name] = "model-00003-of-00003.safetensors"  # the index lies
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(KdtreeError, match=rf"model-00003-of-00003\.safetensors: cannot read tensor '{name}'"):
        load_target(d)


def test_missing_directory_and_config(tmp_path):
    with pytest.raises(KdtreeError, match="does not exist"):
        load_target(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(KdtreeError, match=r"config\.json not found"):
        load_target(tmp_path / "empty")
    (tmp_path / "empty" / "config.json").write_text("{oops")
    with pytest.raises(KdtreeError, match="not valid JSON"):
        load_target(tmp_path / "empty")


@pytest.mark.parametrize("override, message", [
    ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
    ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope type 'linear'"),
    ({"n_group": 3}, "n_routed_experts .8. must divide"),
    ({"topk_group": 3, "n_group": 2}, r"topk_group \(3\)"),
    ({"num_experts_per_tok": 9}, "num_experts_per_tok"),
    ({"num_key_value_heads": 2}, "num_key_value_heads"),
    ({"attention_bias": True}, "attention_bias"),
    ({"hidden_size": 0}, "hidden_size must be an integer >= 1"),
    ({"scoring_func": "softmax"}, "scoring_func = 'softmax' is not supported"),
    ({"quantization_config": {"quant_method": "fp8"}}, r"quantized checkpoints \(fp8\) are not supported"),
    ({"quantization_config": {"quant_method": "compressed-tensors", "format": "float-quantized"}},
     r"quantization_config\.format = 'float-quantized' is not supported"),
])
def test_unsupported_config_values_are_refused(override, message):
    with pytest.raises(KdtreeError, match=message):
        config_from_dict(tiny_config(**override), "x/config.json")
