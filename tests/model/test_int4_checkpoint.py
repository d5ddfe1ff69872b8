"""INT4 checkpoints made by the compressed-tensors package: our loader's dequantized experts
equal the package's bit for bit, our logits equal transformers' on the package-dequantized
model, transformers reads the INT4 folder to the same weights, and every malformed config or
tensor is refused with an error naming the file and the key or tensor."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from hf_oracle import hf_model, prompt_away_from_ties, rel_err

from python_engine.errors import KdtreeError
from python_engine.model.synthetic_checkpoint import write_random_target
from python_engine.model.target_loader import load_target

pytest.importorskip("compressed_tensors")
from int4_oracle import INT4_CONFIG, package_dequantize, write_dequantized, write_package_int4  # noqa: E402

TOL = 1e-5
WEIGHT_SEED = 41
EXPERT = "model.layers.1.mlp.experts.2.up_proj"  # [moe_intermediate 32, hidden 64]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("int4")
    bf16 = write_random_target(root / f"bf16-seed{WEIGHT_SEED}", INT4_CONFIG, seed=WEIGHT_SEED, dtype=torch.bfloat16)
    int4 = write_package_int4(bf16, root / "int4", shards=2)
    return {"bf16": bf16, "int4": int4, "dequantized": write_dequantized(int4, root / "dequantized")}


def logits(model, ids):
    return model.forward(ids, torch.arange(len(ids)), model.new_cache()).logits


def test_loaded_experts_equal_the_packages_dequantization_bit_for_bit(dirs):
    ref = package_dequantize(dirs["int4"])
    source = load_target(dirs["bf16"], dtype=torch.bfloat16)
    ours = load_target(dirs["int4"], dtype=torch.bfloat16)
    assert ours.cfg.quantization is not None and source.cfg.quantization is None
    changed = 0
    for i, (layer, src_layer) in enumerate(zip(ours.w.layers, source.w.layers)):
        if layer.moe is None:
            continue
        for proj in ("gate", "up", "down"):
            for e in range(INT4_CONFIG["n_routed_experts"]):
                expected = ref[f"model.layers.{i}.mlp.experts.{e}.{proj}_proj.weight"]
                got = getattr(layer.moe, proj)[e]
                assert got.dtype == expected.dtype == torch.bfloat16
                assert torch.equal(got.view(torch.int16), expected.view(torch.int16))
                changed += not torch.equal(got, getattr(src_layer.moe, proj)[e])
        # everything else is read as stored, unquantized
        assert all(torch.equal(a, b) for a, b in zip(layer.moe.shared, src_layer.moe.shared))
        assert torch.equal(layer.attn.q_b_proj, src_layer.attn.q_b_proj)
    assert changed == 3 * INT4_CONFIG["n_routed_experts"] * (INT4_CONFIG["num_hidden_layers"] - 1)


def test_logits_match_transformers_on_the_dequantized_model(dirs, seed):
    ours, hf = load_target(dirs["int4"]), hf_model(dirs["dequantized"])
    # a token behind an expert-routing near-tie may take either expert (seed 1382848382: two
    # experts at 0.36114 for the third place, position 18, the last MoE layer): draw away from ties
    ids = prompt_away_from_ties(hf, seed, 30)
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    assert rel_err(logits(ours, ids), ref) <= TOL
    cache = ours.new_cache()  # a prefill, then one token at a time through the latent cache
    rows = [ours.forward(ids[:20], torch.arange(20), cache).logits]
    rows += [ours.forward([ids[i]], [i], cache).logits for i in range(20, 30)]
    assert rel_err(torch.cat(rows), ref) <= TOL
    assert ref.softmax(-1).max(-1).values.mean() < 0.95 and ref.std(-1).min() > 0.5  # not degenerate
    # INT4 moved the logits away from the bf16 source: the comparison above saw quantized experts
    assert rel_err(logits(load_target(dirs["bf16"]), ids), ref) > 100 * TOL


def test_transformers_reads_the_int4_folder_to_the_same_experts(dirs):
    hf = hf_model(dirs["int4"])  # through transformers' compressed-tensors support
    ours = load_target(dirs["int4"], dtype=torch.bfloat16)
    inter = INT4_CONFIG["moe_intermediate_size"]
    for i, layer in enumerate(ours.w.layers):
        if layer.moe is None:
            continue
        experts = hf.model.layers[i].mlp.experts  # fused: gate_up_proj [E, 2I, H], down_proj [E, H, I]
        gate_up = experts.gate_up_proj.detach()
        assert torch.equal(gate_up[:, :inter].to(torch.bfloat16), layer.moe.gate)
        assert torch.equal(gate_up[:, inter:].to(torch.bfloat16), layer.moe.up)
        assert torch.equal(experts.down_proj.detach().to(torch.bfloat16), layer.moe.down)


# --- refusals --------------------------------------------------------------------------------

def edited_config(src, dst, edit):
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    edit(cfg["quantization_config"])
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def set_weights(key, value):
    return lambda qc: qc["config_groups"]["group_0"]["weights"].__setitem__(key, value)


@pytest.mark.parametrize("edit, message", [
    (set_weights("num_bits", 8), r"quantization_config\.config_groups\.group_0\.weights\.num_bits = 8 is not supported"),
    (set_weights("group_size", 128), r"weights\.group_size = 128 is not supported \(expected 32"),
    (set_weights("symmetric", False), r"weights\.symmetric = False .*zero points"),
    (set_weights("type", "float"), r"weights\.type = 'float'"),
    (set_weights("actorder", "group"), r"weights\.actorder = 'group' is not supported"),
    (lambda qc: qc.__setitem__("format", "int-quantized"), r"quantization_config\.format = 'int-quantized'"),
    (lambda qc: qc.__setitem__("quant_method", "fp8"), r"quantized checkpoints \(fp8\) are not supported"),
    (lambda qc: qc["config_groups"]["group_0"].__setitem__("input_activations", {"num_bits": 8}),
     r"input_activations is not supported \(W4A16"),
    (lambda qc: qc["config_groups"].__setitem__("group_1", qc["config_groups"]["group_0"]),
     r"config_groups must hold exactly one group"),
    (lambda qc: qc.__setitem__("ignore", qc["ignore"][1:]), r"quantizes 1 linear layer\(s\) that are not routed "
                                                            r"experts, e.g. 'lm_head'"),
    (lambda qc: qc["ignore"].remove("re:.*self_attn.*"), r"e\.g\. 'model\.layers\.0\.self_attn\.q_a_proj'"),
    (lambda qc: qc["ignore"].append("re:.*layers\\.2\\.mlp\\.experts.*"),
     r"leaves 24 routed expert layer\(s\) unquantized, e\.g\. 'model\.layers\.2\.mlp\.experts\.0\.gate_proj'"),
    (lambda qc: qc["ignore"].append("re:(unclosed"), r"pattern 're:\(unclosed' is not a valid regex"),
])
def test_unsupported_quantization_configs_are_refused(dirs, tmp_path, edit, message):
    d = edited_config(dirs["int4"], tmp_path / "m", edit)
    with pytest.raises(KdtreeError, match=rf"{d}/config\.json: .*{message}"):
        load_target(d)


def test_group_size_must_divide_the_quantized_widths(dirs, tmp_path):
    from python_engine.model.config import config_from_dict

    raw = json.loads((dirs["int4"] / "config.json").read_text())
    raw["moe_intermediate_size"] = 48
    with pytest.raises(KdtreeError, match=r"x\.json: quantization_config: group size 32 does not divide .* 48"):
        config_from_dict(raw, "x.json")


def test_the_quantization_config_is_read_inside_kimis_text_config(dirs):
    from python_engine.model.config import config_from_dict

    raw = json.loads((dirs["int4"] / "config.json").read_text())
    qc = raw.pop("quantization_config")
    kimi = {"architectures": ["KimiK25ForConditionalGeneration"], "text_config": dict(raw, quantization_config=qc)}
    assert config_from_dict(kimi, "k.json").quantization.group_size == 32
    other = json.loads(json.dumps(qc))
    other["ignore"] = other["ignore"][:2]
    with pytest.raises(KdtreeError, match="differs between the top level and text_config"):
        config_from_dict(dict(kimi, quantization_config=other), "k.json")


def single_file_copy(src, dst):
    """The checkpoint as one model.safetensors (no index), its tensors for editing."""
    from int4_oracle import read_dir

    dst.mkdir()
    shutil.copy(src / "config.json", dst / "config.json")
    return read_dir(src)


def save(tensors, d):
    from safetensors.torch import save_file

    save_file(tensors, str(d / "model.safetensors"))


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.pop(f"{EXPERT}.weight_scale"), rf"tensor '{EXPERT}\.weight_scale' is missing"),
    (lambda t: t.pop(f"{EXPERT}.weight_packed"), rf"tensor '{EXPERT}\.weight_packed' is missing$"),
    # truncated: one int32 word short per row
    (lambda t: t.__setitem__(f"{EXPERT}.weight_packed", t[f"{EXPERT}.weight_packed"][:, :-1].clone()),
     rf"model\.safetensors: tensor '{EXPERT}\.weight_packed' has shape \[32, 7\], expected \[32, 8\]"),
    (lambda t: t.__setitem__(f"{EXPERT}.weight_scale", t[f"{EXPERT}.weight_scale"][:-1].clone()),
     rf"model\.safetensors: tensor '{EXPERT}\.weight_scale' has shape \[31, 2\], expected \[32, 2\]"),
    (lambda t: t.__setitem__(f"{EXPERT}.weight_shape", torch.tensor([32, 96])),
     rf"model\.safetensors: tensor '{EXPERT}\.weight_shape' is \[32, 96\] .*expected the integers \[32, 64\]"),
    (lambda t: t.__setitem__(f"{EXPERT}.weight_packed", t[f"{EXPERT}.weight_packed"].to(torch.int64)),
     rf"tensor '{EXPERT}\.weight_packed' has dtype torch\.int64, expected torch\.int32"),
    (lambda t: t.__setitem__(f"{EXPERT}.weight_scale", t[f"{EXPERT}.weight_scale"].float()),
     rf"tensor '{EXPERT}\.weight_scale' has dtype torch\.float32, expected torch\.bfloat16"),
    # stored unquantized although the config says INT4
    (lambda t: [t.pop(f"{EXPERT}.weight_{k}") for k in ("packed", "scale", "shape")]
     and t.__setitem__(f"{EXPERT}.weight", torch.zeros(32, 64, dtype=torch.bfloat16)),
     rf"'{EXPERT}\.weight_packed' is missing \(the checkpoint has a float '{EXPERT}\.weight' instead"),
    # an attention weight packed: the config says bf16, the reader wants a float .weight
    (lambda t: t.__setitem__("model.layers.0.self_attn.o_proj.weight",
                             t["model.layers.0.self_attn.o_proj.weight"].to(torch.int32)),
     r"model\.safetensors: tensor 'model\.layers\.0\.self_attn\.o_proj\.weight' has dtype torch\.int32"),
])
def test_malformed_int4_tensors_name_the_file_and_tensor(dirs, tmp_path, edit, message):
    d = tmp_path / "m"
    tensors = single_file_copy(dirs["int4"], d)
    edit(tensors)
    save(tensors, d)
    with pytest.raises(KdtreeError, match=message):
        load_target(d)


def test_a_truncated_int4_file_names_the_file(dirs, tmp_path):
    d = tmp_path / "m"
    save(single_file_copy(dirs["int4"], d), d)
    f = d / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-64])
    with pytest.raises(KdtreeError, match=r"model\.safetensors"):
        load_target(d)


def test_fp8_weights_are_still_refused(dirs, tmp_path):
    d = tmp_path / "m"
    tensors = single_file_copy(dirs["bf16"], d)
    name = "model.layers.0.self_attn.o_proj.weight"
    tensors[name] = tensors[name].to(torch.float8_e4m3fn)
    save(tensors, d)
    with pytest.raises(KdtreeError, match=rf"tensor '{name}' is FP8"):
        load_target(d)
