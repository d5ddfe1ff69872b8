"""`kdtree plan`: a model on a host, before any weights exist: the per-GPU memory plan, the
largest context for each slot count, and the projected round time and tokens/s per budget,
each input named with its source (python_engine/plan/)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from python_engine.errors import KdtreeError
from python_engine.project import PROJECT_ROOT

DEFAULT_MODEL = PROJECT_ROOT / "refs" / "configs" / "kimi-k2.6"
DEFAULT_DRAFTER = PROJECT_ROOT / "refs" / "configs" / "kimi-k2.6-dflash"
ARCH_PROFILES = {"120": "rtx-pro-6000", "90a": "h200", "90": "h200"}  # a host's arch -> its GPUs' profile


def host_from_inventory(name: str, config: Path | None):
    """A kdtree.toml host as the plan needs it: its GPUs' profile, count, interconnect, p2p."""
    from python_engine.device_profiles import device_profile
    from python_engine.plan.cost import Host
    from python_engine.plan.report import p2p_enabled
    from remote.inventory import load_inventory

    h = load_inventory(config).get(name)
    profile_name = getattr(h, "profile", None) or next((ARCH_PROFILES[a] for a in h.arch if a in ARCH_PROFILES), None)
    if not profile_name:
        raise KdtreeError(f"host {name}: no device profile for arch {list(h.arch) or '(unset)'}: "
                          f"give --profile ({', '.join(sorted(set(ARCH_PROFILES.values())))})")
    profile = device_profile(profile_name)
    if h.gpus < 1:
        raise KdtreeError(f"host {name}: gpus = {h.gpus} in {h.source}; a plan needs the GPU count")
    return Host(profile, h.gpus, profile.interconnect, p2p_enabled(h.p2p, profile)), f"{name} ({h.source})"


def _parse_budgets(text: str) -> tuple[int, ...]:
    try:
        out = tuple(sorted({int(b) for b in text.split(",") if b.strip()}))
    except ValueError:
        raise KdtreeError(f"--budgets {text!r}: give integers, e.g. 0,4,8,16,32,64 (0: AR)") from None
    if not out or out[0] < 0:
        raise KdtreeError(f"--budgets {text!r}: give budgets >= 0 (0: AR)")
    return out


def _parse_taus(text: str | None) -> dict[int, float]:
    if not text:
        return {}
    out = {}
    for item in text.split(","):
        try:
            b, t = item.split("=")
            out[int(b)] = float(t)
        except ValueError:
            raise KdtreeError(f"--tau {text!r}: give BUDGET=TAU pairs, e.g. 8=5.3,64=7.0") from None
        if out[int(b)] < 1:
            raise KdtreeError(f"--tau {item}: tau is tokens a round, at least 1")
    return out


def plan(
    model: Annotated[Path, typer.Option("--model", help="Target directory holding config.json.",
                                        show_default="refs/configs/kimi-k2.6")] = DEFAULT_MODEL,
    drafter: Annotated[Optional[Path], typer.Option("--drafter", help="DFlash drafter directory (config.json); "
                                                    "--no-drafter for AR only.", show_default="refs/configs/kimi-k2.6-dflash")] = None,
    no_drafter: Annotated[bool, typer.Option("--no-drafter", help="Plan AR only, without a drafter.")] = False,
    host: Annotated[Optional[str], typer.Option("--host", help="A host of kdtree.toml / hosts.toml (its GPUs, count, p2p).",
                                                show_default=False)] = None,
    profile: Annotated[Optional[str], typer.Option("--profile", help="Device profile instead of --host: h200, rtx-pro-6000.",
                                                   show_default=False)] = None,
    gpus: Annotated[int, typer.Option("--gpus", help="GPUs the model is split over (with --profile).", min=1)] = 8,
    interconnect: Annotated[Optional[str], typer.Option("--interconnect", help="nvlink or pcie (with --profile; "
                                                        "default: the profile's).", show_default=False)] = None,
    p2p: Annotated[str, typer.Option("--p2p", help="NCCL peer-to-peer: auto, on or off (with --profile).")] = "auto",
    context: Annotated[int, typer.Option("--context", help="Tokens of context per request for the round projection.",
                                         min=1)] = 32768,
    slots: Annotated[int, typer.Option("--slots", help="Requests decoded together.", min=1)] = 1,
    budgets: Annotated[str, typer.Option("--budgets", help="DDTree node budgets to project (0: AR).")] = "0,4,8,16,32,64",
    gpu_memory_limit: Annotated[Optional[float], typer.Option("--gpu-memory-limit", help="GiB of each GPU to plan in, as kdtree run's "
                                                              "(default: the card's).", min=0.1, show_default=False)] = None,
    reserve: Annotated[float, typer.Option("--reserve", help="GB each GPU keeps off the plan (CUDA context, driver).",
                                           min=0.0)] = 1.0,
    acceptance: Annotated[Optional[float], typer.Option("--acceptance", help="tau at budget 8 (default: z-lab's 5.3 "
                                                        "for Kimi K2.5 DFlash at block 8).", min=1.0,
                                                        show_default=False)] = None,
    tau: Annotated[Optional[str], typer.Option("--tau", help="tau per budget, overriding the curve: 8=5.3,64=7.0.",
                                               show_default=False)] = None,
    routing: Annotated[Optional[Path], typer.Option("--routing", help="Measured routing sharing: the routing.json "
                                                    "`kdtree bench routing` writes; default: random routing.",
                                                    show_default=False)] = None,
    allreduce_us: Annotated[Optional[float], typer.Option("--allreduce-us", help="Your own figure for one all-reduce, "
                                                          "in us, instead of the model's.", min=0.0,
                                                          show_default=False)] = None,
    dtype: Annotated[str, typer.Option("--dtype", help="Compute dtype: bfloat16 or float32.")] = "bfloat16",
    config: Annotated[Optional[Path], typer.Option("--config", help="Project inventory file (default: kdtree.toml).",
                                                   envvar="KDTREE_CONFIG", show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Plan a model on a host: memory per GPU, what fits, and projected tokens/s per budget.

    Reads only config.json files (no weights). The memory plan follows the native engine's split (heads, experts and vocabulary over the GPUs; the drafter on every GPU); the projection adds up weights read, attention, collectives, the drafter and the round's machinery, each input with its source: measured (results/, file and commit), spec (the device profile) or projection.
    """
    from python_engine.device_profiles import device_profile
    from python_engine.plan.cost import Host, RoutingSharing
    from python_engine.plan.report import PlanRequest, build_plan, default_acceptance, p2p_enabled

    import math

    for name, value in (("--gpu-memory-limit", gpu_memory_limit), ("--reserve", reserve),
                        ("--acceptance", acceptance), ("--allreduce-us", allreduce_us)):
        if value is not None and not math.isfinite(value):
            raise KdtreeError(f"{name} {value}: give a finite number")
    if (host is None) == (profile is None):
        raise KdtreeError("give --host NAME (from kdtree.toml) or --profile NAME --gpus N [--interconnect pcie]")
    if p2p not in ("auto", "on", "off"):
        raise KdtreeError(f"--p2p {p2p!r}: choose auto, on or off")
    if host is not None:
        h, host_name = host_from_inventory(host, config)
    else:
        prof = device_profile(profile)
        link = interconnect or prof.interconnect
        if link not in ("nvlink", "pcie"):
            raise KdtreeError(f"--interconnect {link!r}: choose nvlink or pcie")
        h, host_name = Host(prof, gpus, link, p2p_enabled(p2p, prof) if link == "pcie" else p2p != "off"), \
            f"{prof.name} x {gpus} ({link})"
    request = PlanRequest(
        model=model, drafter=None if no_drafter else (drafter or DEFAULT_DRAFTER), host=h, host_name=host_name,
        context=context, slots=slots, budgets=_parse_budgets(budgets), memory_limit_gib=gpu_memory_limit,
        reserve_gb=reserve, acceptance=default_acceptance(acceptance, _parse_taus(tau)),
        routing=RoutingSharing.from_file(routing) if routing else RoutingSharing(), allreduce_us=allreduce_us,
        dtype=dtype)
    result = build_plan(request)
    if as_json:
        import json

        print(json.dumps(result, indent=1))
        return
    print_plan(result)


def print_plan(p: dict) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(highlight=False)
    h, m = p["host"], p["memory"]
    console.print(f"[bold]kdtree plan[/]: {escape(p['model'])}"
                  + (f" + {escape(p['drafter'])}" if p["drafter"] else "")
                  + f" on {escape(h['name'])}: {h['gpus']} x {h['profile']}, {h['interconnect']}, "
                  f"p2p {'on' if h['p2p'] else 'off'}, {p['dtype']}")

    t = Table(title=f"memory per GPU ({p['slots']} slot(s) x {p['context']} tokens, budget {p['budget_for_memory']})",
              title_justify="left")
    t.add_column("part")
    t.add_column("GB", justify="right")
    t.add_column("note")
    notes = {"routed_experts": f"{m['experts_per_layer']} experts x {m['moe_layers']} MoE layers, "
                               f"{m['expert_mb']:.2f} MB each (INT4 + scales)",
             "attention": "q_a, kv_a replicated; this GPU's heads of q_b, kv_b, o_proj",
             "dense_mlp": "this GPU's columns", "shared_experts": "this GPU's columns",
             "routers": "replicated, float32", "embedding": "replicated",
             "lm_head": "this GPU's vocabulary rows", "norms": "replicated", "drafter": "replicated on every GPU"}
    for part, gb in m["weights_gb"].items():
        t.add_row(part.replace("_", " "), f"{gb:.2f}", notes.get(part, ""))
    t.add_row("[bold]weights[/]", f"[bold]{m['weights_total_gb']:.2f}[/]", "")
    t.add_row("latent cache", f"{m['target_cache_gb']:.2f}", "576 values a token a layer, every GPU")
    t.add_row("drafter cache", f"{m['drafter_cache_gb']:.2f}", "K and V of the drafter's layers, + slot table")
    t.add_row("workspace", f"{m['workspace_gb']:.2f}", "estimate: the engine's buffers at the largest forward")
    t.add_row("reserve", f"{m['reserve_gb']:.2f}", "CUDA context and driver (assumption, --reserve)")
    left = m["left_gb"]
    t.add_row("[bold]left[/]", f"[bold {'green' if left >= 0 else 'red'}]{left:.2f}[/]",
              f"of {m['limit_gb']:.2f} ({escape(m['limit_source'])})")
    console.print(t)

    f = Table(title="largest context that fits, per slot count", title_justify="left")
    f.add_column("slots", justify="right")
    f.add_column("tokens a slot", justify="right")
    for row in m["largest_context_by_slots"]:
        f.add_row(str(row["slots"]), f"{row['largest_context']:,}" if row["largest_context"] else "[red]none[/]")
    console.print(f)

    r = Table(title=f"projected round, {p['slots']} request(s) at {p['context']} tokens of context",
              title_justify="left")
    for col in ("budget", "rows", "experts/layer", "read GB", "weights ms", "attention ms", "collectives ms",
                "drafter ms", "other ms", "round ms", "tau", "tokens/s"):
        r.add_column(col, justify="right")
    for x in p["rounds"]:
        r.add_row("AR" if x["mode"] == "AR" else str(x["budget"]), str(x["rows"]), f"{x['distinct_experts']:.0f}",
                  f"{x['read_gb']:.1f}", f"{x['weights_ms']:.2f}", f"{x['attention_ms']:.2f}",
                  f"{x['collectives_ms']:.2f}", f"{x['drafter_ms']:.2f}", f"{x['machinery_ms'] + x['latency_ms']:.2f}",
                  f"{x['round_ms']:.2f}", f"{x['tau']:.2f}", f"[bold]{x['tokens_per_s']:.0f}[/]")
    console.print(r)

    i = Table(title="inputs", title_justify="left")
    for col in ("input", "value", "kind", "source"):
        i.add_column(col)
    for x in p["inputs"]:
        i.add_row(escape(x["name"]), f"{x['value']:.4g} {escape(x['unit'])}", x["kind"], escape(x["source"]))
    console.print(i)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
