"""`kdtree plan`'s work: from the configs and a host, the per-GPU memory plan, the largest
context for each slot count, and the projected round per budget, with every input named.
Returns plain data (what --json prints); kdtree_cli/commands/plan.py draws the tables."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from python_engine.device_profiles import GIB, DeviceProfile
from python_engine.errors import KdtreeError
from python_engine.model.config import load_target_config
from python_engine.model.drafter_config import check_against_target, load_drafter_config
from python_engine.plan.cost import Acceptance, CostModel, Host, RoutingSharing, ZLAB_ACCEPTANCE, ZLAB_SOURCE
from python_engine.plan.memory import largest_context, memory_plan
from python_engine.plan.weights import PARTS, drafter_weights, target_weights

GB = 1e9
DEFAULT_RESERVE_GB = 1.0  # CUDA context, driver and allocator slack a process keeps off the plan (an assumption)
SLOT_COUNTS = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class PlanRequest:
    model: Path
    drafter: Path | None
    host: Host
    host_name: str
    context: int = 32768
    slots: int = 1
    budgets: tuple[int, ...] = (0, 4, 8, 16, 32, 64)
    memory_limit_gib: float | None = None  # GiB, as kdtree run and bench engine take it
    reserve_gb: float = DEFAULT_RESERVE_GB
    acceptance: Acceptance = Acceptance()
    routing: RoutingSharing = RoutingSharing()
    allreduce_us: float | None = None
    dtype: str = "bfloat16"


def p2p_enabled(setting: str, profile: DeviceProfile) -> bool:
    """Whether NCCL's peer-to-peer path is used: "auto" turns it off on PCIe-only
    RTX PRO 6000-class boxes (python_engine/native/multi_gpu.py says why)."""
    if setting == "auto":
        return profile.interconnect != "pcie"
    return setting == "on"


def build_plan(req: PlanRequest) -> dict:
    cfg = load_target_config(req.model)
    d = load_drafter_config(req.drafter) if req.drafter else None
    if d is not None:
        check_against_target(d, cfg)
    if req.context > cfg.max_position_embeddings:
        raise KdtreeError(f"--context {req.context}: over the model's max_position_embeddings "
                          f"({cfg.max_position_embeddings}, {req.model}/config.json)")
    host, n = req.host, req.host.gpus
    limit = int((req.memory_limit_gib * GIB) if req.memory_limit_gib else host.profile.memory.value)
    if req.memory_limit_gib and req.memory_limit_gib * GIB > host.profile.memory.value:
        raise KdtreeError(f"--gpu-memory-limit {req.memory_limit_gib:g} GiB is more than the "
                          f"{host.profile.name}'s {host.profile.memory.value / GIB:.1f} GiB")
    reserve = int(req.reserve_gb * GB)
    top_budget = max(req.budgets)
    weights = target_weights(cfg, n, req.dtype)
    dbytes = drafter_weights(d, dtype=req.dtype) if d is not None else 0
    mem = memory_plan(cfg, d, world=n, slots=req.slots, context=req.context, budget=top_budget, limit=limit,
                      reserve=reserve, dtype=req.dtype)
    parts = {p: weights.bytes[p] for p in PARTS if p != "drafter"}
    parts["drafter"] = dbytes
    fits = [{"slots": s, "largest_context": largest_context(cfg, d, world=n, slots=s, budget=top_budget, limit=limit,
                                                            reserve=reserve, dtype=req.dtype)}
            for s in SLOT_COUNTS]
    model = CostModel(host, req.context, req.slots, req.acceptance, req.routing, req.allreduce_us, req.dtype,
                      cfg.hidden_size)
    rounds = []
    for b in req.budgets:
        r = model.project(cfg, d, weights, dbytes, b)
        rounds.append({"budget": b, "mode": "AR" if b == 0 or d is None else "DDTree", "rows": r.rows,
                       "distinct_experts": round(r.distinct_experts, 1), "read_gb": r.weight_bytes / GB,
                       "weights_ms": r.weights_ms, "attention_ms": r.attention_ms, "latency_ms": r.latency_ms,
                       "collectives_ms": r.collectives_ms, "drafter_ms": r.drafter_ms,
                       "machinery_ms": r.machinery_ms, "round_ms": r.round_ms, "tau": r.tau,
                       "tokens_per_s": r.tokens_per_s(req.slots)})
    return {
        "host": {"name": req.host_name, "profile": host.profile.name, "gpus": n, "interconnect": host.interconnect,
                 "p2p": host.p2p},
        "model": str(req.model), "drafter": str(req.drafter) if req.drafter else None,
        "dtype": req.dtype, "context": req.context, "slots": req.slots, "budget_for_memory": top_budget,
        "memory": {
            "limit_gb": limit / GB, "reserve_gb": reserve / GB,
            "limit_source": ("--gpu-memory-limit" if req.memory_limit_gib else
                             f"the {host.profile.name}'s {host.profile.memory.value / 2**30:.0f} GiB, "
                             f"{host.profile.memory.kind}"),
            "weights_gb": {k: v / GB for k, v in parts.items()},
            "weights_total_gb": (weights.total + dbytes) / GB,
            "experts_per_layer": weights.experts_per_layer, "moe_layers": weights.moe_layers,
            "expert_mb": weights.expert_bytes / 1e6,
            "target_cache_gb": mem.target_cache / GB, "drafter_cache_gb": mem.drafter_cache / GB,
            "workspace_gb": mem.workspace / GB, "used_gb": mem.used / GB, "left_gb": mem.left / GB,
            "fits": mem.fits,
            "largest_context_by_slots": fits,
        },
        "rounds": rounds,
        "inputs": [{"name": i.name, "value": i.value, "unit": i.unit, "kind": i.kind, "source": i.source}
                   for i in model.inputs()],
    }


def default_acceptance(at_budget_8: float | None, taus: dict[int, float]) -> Acceptance:
    if at_budget_8 is None:
        return Acceptance(ZLAB_ACCEPTANCE, ZLAB_SOURCE, taus)
    return Acceptance(at_budget_8, "--acceptance", taus)
