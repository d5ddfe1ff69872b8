"""The one quantization the engine reads: compressed-tensors `pack-quantized` INT4 routed
experts (W4A16, symmetric, group size 32), as Kimi K2.6 declares it in config.json.

`int4_scheme_from_config` validates a `quantization_config` and refuses anything else (FP8,
other bit widths or group sizes, zero points, activation quantization, ...) with a
KdtreeError naming the file and the key. `Int4Scheme.check_modules` then checks which
linear layers it quantizes: exactly the routed experts' gate/up/down projections, everything
else (attention, shared experts, dense MLPs, lm_head) in bf16. Module matching follows the
compressed-tensors package: an entry "re:<regex>" matches a module name from its start
(`re.match`), any other entry is an exact module name or the class name "Linear".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from python_engine.errors import KdtreeError

if TYPE_CHECKING:
    from python_engine.model.config import TargetConfig

QUANT_METHOD = "compressed-tensors"
FORMAT = "pack-quantized"
BITS = 4  # python_engine.model.int4 packs and unpacks; the numbers live here
GROUP_SIZE = 32  # input columns per scale (Kimi K2.6's group size)
LINEAR = "Linear"  # the class-name target: every linear layer of the model

# What `kdtree quantize` writes (Kimi's published ignore list): attention, shared experts,
# the dense layers' MLPs and lm_head stay bf16 (the router, mlp.gate, is not a Linear module).
IGNORE_PATTERNS = [r"re:.*self_attn.*", r"re:.*shared_experts.*", r"re:.*mlp\.(gate|up|gate_up|down)_proj.*"]


def int4_quantization_config(prefix: str = "") -> dict:
    """The config.json `quantization_config` of an INT4 checkpoint whose language model's
    tensor names start with `prefix` (Kimi's multimodal layout: "language_model."). There,
    lm_head's exact name takes the prefix, and one more entry, a negative lookahead, ignores
    every module outside the language model (the vision tower's linears stay as stored)."""
    outside = [f"re:(?!{re.escape(prefix)})"] if prefix else []
    weights = {"num_bits": BITS, "type": "int", "symmetric": True, "strategy": "group",
               "group_size": GROUP_SIZE, "dynamic": False, "actorder": None, "block_structure": None,
               "observer": "minmax", "observer_kwargs": {}}
    return {
        "quant_method": QUANT_METHOD,
        "format": FORMAT,
        "quantization_status": "compressed",
        "config_groups": {"group_0": {"targets": [LINEAR], "weights": weights,
                                      "input_activations": None, "output_activations": None}},
        "ignore": [prefix + "lm_head", *IGNORE_PATTERNS, *outside],
        "kv_cache_scheme": None,
    }


@dataclass(frozen=True)
class Int4Scheme:
    group_size: int
    targets: tuple[str, ...]
    ignore: tuple[str, ...]
    source: str = "<config>"

    def quantizes(self, module: str) -> bool:
        """Whether linear layer `module` (full name, e.g. model.layers.3.mlp.experts.0.up_proj)
        is stored INT4 under this scheme."""
        return any(_matches(module, t) for t in self.targets) and not any(_matches(module, i) for i in self.ignore)

    def check_modules(self, cfg: TargetConfig, prefix: str = "") -> None:
        """Refuse a scheme that quantizes anything but the routed experts, or leaves one in bf16."""
        wrong_int4, wrong_bf16 = [], []
        for module, routed in linear_modules(cfg, prefix):
            if self.quantizes(module) != routed:
                (wrong_bf16 if routed else wrong_int4).append(module)
        key = f"{self.source}: quantization_config"
        if wrong_int4:
            raise KdtreeError(
                f"{key} quantizes {len(wrong_int4)} linear layer(s) that are not routed experts, e.g. "
                f"{wrong_int4[0]!r}: the engine reads INT4 for routed experts only (attention, shared "
                "experts, dense MLPs and lm_head must be in its ignore list)"
            )
        if wrong_bf16:
            raise KdtreeError(
                f"{key} leaves {len(wrong_bf16)} routed expert layer(s) unquantized, e.g. "
                f"{wrong_bf16[0]!r} (its targets / ignore list): the engine reads all routed experts "
                "INT4 or none"
            )


def _matches(module: str, entry: str) -> bool:
    if entry.startswith("re:"):
        return re.match(entry[3:], module) is not None
    return entry == module or entry == LINEAR


def linear_modules(cfg: TargetConfig, prefix: str = ""):
    """(name, is_routed_expert) for every linear layer of the target, under transformers'
    DeepseekV3 names (the names quantization_config's targets and ignore list match)."""
    for i in range(cfg.num_hidden_layers):
        p = f"{prefix}model.layers.{i}."
        a = p + "self_attn."
        q = ["q_proj"] if cfg.q_lora_rank is None else ["q_a_proj", "q_b_proj"]
        for name in (*q, "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"):
            yield a + name, False
        if not cfg.is_moe_layer(i):
            for proj in ("gate_proj", "up_proj", "down_proj"):
                yield f"{p}mlp.{proj}", False
            continue
        for e in range(cfg.n_routed_experts):
            for proj in ("gate_proj", "up_proj", "down_proj"):
                yield f"{p}mlp.experts.{e}.{proj}", True
        if cfg.n_shared_experts:
            for proj in ("gate_proj", "up_proj", "down_proj"):
                yield f"{p}mlp.shared_experts.{proj}", False
    yield f"{prefix}lm_head", False


def int4_scheme_from_config(raw: dict, text_cfg: dict, where: str,
                            in_features: tuple[int, ...] = ()) -> Int4Scheme | None:
    """The INT4 scheme declared by config.json (top level, or Kimi's text_config), None when
    the checkpoint is not quantized. `in_features` are the quantized layers' input widths,
    each of which the group size must divide."""
    places = [raw] if text_cfg is raw else [raw, text_cfg]
    found = [p["quantization_config"] for p in places if p.get("quantization_config")]
    if not found:
        return None
    if len(found) == 2 and found[0] != found[1]:
        raise KdtreeError(f"{where}: quantization_config differs between the top level and text_config")
    qc = found[0]
    key = "quantization_config"
    if not isinstance(qc, dict):
        raise KdtreeError(f"{where}: {key} must be an object")
    method = qc.get("quant_method")
    if method != QUANT_METHOD:
        raise KdtreeError(
            f"{where}: quantized checkpoints ({method or 'no quant_method'}) are not supported; the "
            f"engine reads bf16/fp32 weights, or routed experts in {QUANT_METHOD} {FORMAT} INT4 "
            "(docs/int4.md)"
        )

    def need(path: str, value: Any, expected: Any, why: str = "") -> None:
        if value != expected or type(value) is not type(expected):
            raise KdtreeError(f"{where}: {key}.{path} = {value!r} is not supported (expected "
                              f"{expected!r}{'; ' + why if why else ''})")

    need("format", qc.get("format"), FORMAT, "INT4 packed eight per int32")
    status = qc.get("quantization_status", "compressed")
    need("quantization_status", status, "compressed", "the weights must be stored packed")
    for extra in ("kv_cache_scheme", "sparsity_config", "transform_config", "moe_sparsity_config"):
        if qc.get(extra):
            raise KdtreeError(f"{where}: {key}.{extra} is not supported (expected null)")
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or len(groups) != 1:
        n = len(groups) if isinstance(groups, dict) else groups
        raise KdtreeError(f"{where}: {key}.config_groups must hold exactly one group (got {n!r})")
    (gname, group), = groups.items()
    gkey = f"config_groups.{gname}"
    if not isinstance(group, dict) or not isinstance(group.get("weights"), dict):
        raise KdtreeError(f"{where}: {key}.{gkey}.weights must be an object")
    if group.get("format") is not None:
        need(f"{gkey}.format", group["format"], FORMAT)
    for act in ("input_activations", "output_activations"):
        if group.get(act) is not None:
            raise KdtreeError(f"{where}: {key}.{gkey}.{act} is not supported (W4A16: activations stay bf16)")
    targets = group.get("targets")
    if (not isinstance(targets, list) or not targets or
            not all(isinstance(t, str) and (t == LINEAR or t.startswith("re:")) for t in targets)):
        raise KdtreeError(f"{where}: {key}.{gkey}.targets = {targets!r} is not supported (a list of "
                          f"{LINEAR!r} and 're:' patterns)")
    w = group["weights"]
    wkey = f"{gkey}.weights"
    need(f"{wkey}.num_bits", w.get("num_bits"), BITS)
    need(f"{wkey}.type", w.get("type"), "int")
    need(f"{wkey}.symmetric", w.get("symmetric"), True, "zero points are not supported")
    need(f"{wkey}.strategy", w.get("strategy"), "group")
    need(f"{wkey}.group_size", w.get("group_size"), GROUP_SIZE)
    need(f"{wkey}.dynamic", w.get("dynamic", False), False)
    for absent in ("actorder", "block_structure"):
        if w.get(absent) is not None:
            raise KdtreeError(f"{where}: {key}.{wkey}.{absent} = {w[absent]!r} is not supported (expected null)")
    ignore = qc.get("ignore") or []
    if not isinstance(ignore, list) or not all(isinstance(i, str) for i in ignore):
        raise KdtreeError(f"{where}: {key}.ignore must be a list of strings")
    for entry in (*targets, *ignore):
        if entry.startswith("re:"):
            try:
                re.compile(entry[3:])
            except re.error as exc:
                raise KdtreeError(f"{where}: {key} pattern {entry!r} is not a valid regex ({exc})") from None
    for n in in_features:
        if n % GROUP_SIZE:
            raise KdtreeError(f"{where}: {key}: group size {GROUP_SIZE} does not divide a quantized "
                              f"layer's input width {n}")
    return Int4Scheme(GROUP_SIZE, tuple(targets), tuple(ignore), where)
