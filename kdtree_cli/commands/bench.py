"""`kdtree bench`: kernel timings next to baselines measured in the same run (the work is in
kdtree_cli/bench/). Needs a CUDA GPU; says so and exits 1 without one."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kdtree_cli.host_forwarding import forward_to_host

bench_app = typer.Typer(
    name="bench",
    help="Time the kdtree kernels on this GPU next to what a user would write instead (torch, the "
    "reference heap on one CPU core) and the device's ceilings (cuBLAS GEMM rate, copy bandwidth, one "
    "empty launch), "
    "all measured in the same run. Results: results/<device>/bench/ (JSON, Markdown, PNG plots).",
    no_args_is_help=True,
    rich_markup_mode="rich",
)

ARCH_HELP = "CUDA targets for the build, as for kdtree build \\[default: the visible GPU]."
HOST_HELP = "Run it on this host from kdtree.toml (its deployed release), streaming the output back; the files stay in the release's results/ (kdtree deploy fetches them)."
Arch = Annotated[Optional[str], typer.Option("--arch", help=ARCH_HELP, show_default=False)]
Host = Annotated[Optional[str], typer.Option("--host", help=HOST_HELP, show_default=False)]
KernelsOut = Annotated[Optional[Path], typer.Option(
    "--out", help="Output folder \\[default: results/<device>/bench].", file_okay=False, show_default=False)]


@bench_app.command("kernels", help="Kernel timings with their baselines and ceilings: verify_attn (heads 8/64, "
                   "n 1-256, prefix 1k-128k), topk_logprobs, tree_build (B 1-256, N 16-1024), tree_accept and "
                   "cache_compact. The torch attention baseline is timed with the keys as they are and padded to a "
                   "multiple of 8 (masked: the same result); every 'vs torch' column quotes the faster form and "
                   "names it. Ceilings: cuBLAS GEMM rate, copy bandwidth, the mma.sync rate (a kernel of "
                   "register-operand bf16 MMAs on every SM), one empty launch. The kimi-rank suite (only when named) "
                   "is Kimi K2.6's attention per rank of 8 GPUs: 8 heads, T = 1, 2, 9, 17, 33, 65 query tokens, "
                   "prefixes 1k-128k, batch 1 and 8, each row beside its roofline (cache bytes over the copy "
                   "bandwidth, FLOPs over the mma.sync rate, both from the same run); with --anchor-vllm, vLLM's "
                   "Triton MLA decode kernel is timed on the same rows.")
def kernels(
    ctx: typer.Context,
    suite: Annotated[Optional[str], typer.Option(
        "--suite", "-s", help="Comma-separated suites: ceilings, attn, topk, tree, accept, and kimi-rank "
        "\\[default: all = every one but kimi-rank].",
        show_default=False)] = None,
    quick: Annotated[bool, typer.Option("--quick", help="A few cases per suite and fewer repetitions (the full sweep took 10-15 s on an H200).")] = False,
    anchor_vllm: Annotated[Optional[Path], typer.Option(
        "--anchor-vllm", metavar="DIR", file_okay=False, show_default=False,
        help="A vLLM source tree (a checkout, or the folder holding its `vllm/` package): its Triton MLA decode "
        "kernel (decode_attention_fwd, vllm/v1/attention/ops/triton_decode_attention.py) is loaded alone and "
        "timed on the kimi-rank rows as vLLM's TRITON_MLA backend calls it (paged latent cache of 16-row pages, "
        "a decode row a query token, vLLM's split count, its own tiles), checked against our float32 reference; "
        "the PTX and SASS of its kernel are written beside the results with the count of wgmma / mma.sync "
        "instructions in them. On a Hopper GPU it is also timed as built without wgmma (DISABLE_MMA_V3=1: tl.dot "
        "on mma.sync, as for an sm_120). Needs triton (torch's CUDA wheels bring it).")] = None,
    device_profile: Annotated[Optional[str], typer.Option(
        "--device-profile", metavar="NAME", show_default=False,
        help="Also run the kimi-rank cases under KDTREE_DEVICE_PROFILE=NAME (e.g. rtx-pro-6000: that device's "
        "plans and limits, mma.sync and <= 99 KB of shared memory a block, on this GPU's silicon) in the same bench "
        "process, their times and plans beside the plain run's and vLLM's.")] = None,
    phase_clocks: Annotated[bool, typer.Option(
        "--phase-clocks", help="Instead of the timings: where the cycles of verify_attn, topk_logprobs and tree_build "
        "go, phase by phase. Builds bench_kernels with the phase clocks of csrc/dev/ (-DKD_ATTN_PHASE_CLOCKS, "
        "-DKD_TOPK_PHASE_CLOCKS, -DKD_TREE_PHASE_CLOCKS) in build-phase-clocks/, runs a few Kimi-sized cases one at a "
        "time and writes the clock lines each printed to phase-clocks.json and phase-clocks.md (each case's output: "
        "phase-clocks/*.log).")] = False,
    out: KernelsOut = None,
    arch: Arch = None,
    host: Host = None,
) -> None:
    if host:
        forward_to_host(ctx, host, drop=("out",))
        return
    from rich.console import Console

    from kdtree_cli.bench import report
    from kdtree_cli.bench.kernels import run_kernel_bench
    from kdtree_cli.bench.suites import parse_suites

    err = Console(stderr=True, soft_wrap=True)
    if phase_clocks:
        _phase_clocks(ctx, out, arch, err)
        return
    suites = parse_suites(suite)
    for given, option in ((anchor_vllm, "--anchor-vllm"), (device_profile, "--device-profile")):
        if given is not None and "kimi-rank" not in suites:
            raise typer.BadParameter(f"{option} works on the kimi-rank rows: add kimi-rank to --suite "
                                     "(e.g. --suite ceilings,kimi-rank)", param_hint=option)
    res, written = run_kernel_bench(suites, quick, out, arch, err, anchor_vllm=anchor_vllm,
                                    device_profile=device_profile)
    out_console = Console(soft_wrap=True)
    for g in res.goals():
        if g["value"] is None:
            continue
        shown = report._x(g["value"]) if g["column"].startswith("vs_") else report._us(g["value"])
        mark = "[green]met[/]" if g["met"] else "[red]missed[/]"
        out_console.print(f"{g['goal']:<58} {shown:>10}  {mark}", highlight=False)
    for path in written:
        out_console.print(f"wrote {path}", highlight=False)
    if res.errors:
        err.print(f"[red]{len(res.errors)} case(s) failed[/]; see bench.md", highlight=False)
        raise typer.Exit(1)


def _phase_clocks(ctx: typer.Context, out: Optional[Path], arch: Optional[str], err) -> None:
    """kdtree bench kernels --phase-clocks (alone: it runs cases of its own)."""
    from kdtree_cli.bench.gpu import device_facts, require_gpu
    from kdtree_cli.bench.kernels import default_out_dir
    from kdtree_cli.bench.phase_clocks import run_phase_clocks
    from python_engine.project import PROJECT_ROOT

    given = [f"--{name.replace('_', '-')}" for name in ("suite", "quick", "anchor_vllm", "device_profile")
             if ctx.get_parameter_source(name).name not in ("DEFAULT", "DEFAULT_MAP")]
    if given:
        raise typer.BadParameter(f"--phase-clocks runs cases of its own: drop {', '.join(given)}",
                                 param_hint="--phase-clocks")
    require_gpu("kdtree bench kernels --phase-clocks")
    out = out or default_out_dir(device_facts(PROJECT_ROOT))
    json_path, md_path = run_phase_clocks(out, arch, err)
    typer.echo(md_path.read_text())
    typer.echo(f"wrote {json_path} and {md_path}")


@bench_app.command("all", help="Everything a GPU run of the kernels checks, with one summary: build, native "
                   "tests on fresh large cases, compute-sanitizer (memcheck, racecheck, initcheck), then the kernel "
                   "bench.")
def all_(
    ctx: typer.Context,
    out: KernelsOut = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Seed of the generated test cases (default: fresh, "
                                                "printed).", show_default=False)] = None,
    budget_s: Annotated[float, typer.Option("--budget-s", help="Seconds the whole run may take: steps that no "
                                            "longer fit are skipped (the bench goes quick first).")] = 480.0,
    arch: Arch = None,
    host: Host = None,
) -> None:
    if host:
        forward_to_host(ctx, host, drop=("out",))
        return
    from rich.console import Console

    from kdtree_cli.bench.gpu import device_facts, require_gpu
    from kdtree_cli.bench.gpu_check import run_gpu_check
    from kdtree_cli.bench.kernels import default_out_dir
    from python_engine.project import PROJECT_ROOT

    require_gpu("kdtree bench all")
    out = out or default_out_dir(device_facts(PROJECT_ROOT))
    status = run_gpu_check(out, seed, budget_s, arch, Console(stderr=True, soft_wrap=True))
    if status != 0:
        raise typer.Exit(status)


@bench_app.command("engine", help="Decoding throughput on the demo pair, every engine and mode in one run: torch "
                   "AR and DDTree, native AR and DDTree (each budget), 32 requests at once; stage times, the "
                   "machinery share of a round, and DDTree == AR per check. Writes engine.json and engine.md.")
def engine(
    dtype: Annotated[Optional[str], typer.Option(
        help="float32 or bfloat16 (both engines) \\[default: float32; bfloat16 with --model].",
        show_default=False)] = None,
    prompts: Annotated[int, typer.Option(help="Prompts (lines of this repository's Python source).", min=1)] = 8,
    max_tokens: Annotated[int, typer.Option(help="Tokens per request.", min=1)] = 128,
    model: Annotated[Optional[Path], typer.Option(
        "--model", help="Instead of the demo pair: the round cost of this model (a config.json suffices with "
        "--load-format dummy) on the native engine, per batch x context x budget, with its memory report "
        "(rank_round.json/md).", show_default=False)] = None,
    drafter: Annotated[Optional[Path], typer.Option("--drafter", help="With --model: its DFlash drafter.",
                                                    show_default=False)] = None,
    load_format: Annotated[str, typer.Option(
        "--load-format", help="With --model: checkpoint, or dummy (weights made on the GPU: no files, timing and "
        "memory only).")] = "dummy",
    world_size: Annotated[int, typer.Option(
        "--world-size", min=1, help="With --model: one rank's share of an N-GPU split alone (collectives not run).")] = 1,
    rank: Annotated[int, typer.Option("--rank", min=0, help="With --world-size: which rank.")] = 0,
    gpu_memory_limit: Annotated[Optional[float], typer.Option(
        "--gpu-memory-limit", help="With --model: GiB the engine may use (e.g. 96: an RTX PRO 6000's).",
        show_default=False)] = None,
    contexts: Annotated[str, typer.Option(help="With --model: prompt lengths, comma-separated.")] = "1024,32768,131072",
    batches: Annotated[str, typer.Option(help="With --model: requests at once, comma-separated.")] = "1,8",
    budgets: Annotated[str, typer.Option(help="With --model: DDTree budgets, 0 = AR, comma-separated.")] = "0,4,8,16,32,64",
    rounds: Annotated[int, typer.Option(help="With --model: rounds timed per case, after warm-up.", min=1)] = 8,
    emulated: Annotated[bool, typer.Option(
        "--emulated", help="With --model: on the CPU emulator, to check the bench itself (its times mean nothing).")] = False,
    out: Annotated[Optional[Path], typer.Option(
        "--out", help="Output folder \\[default: results/<device>/engine].", file_okay=False, show_default=False)] = None,
) -> None:
    from kdtree_cli.bench.engine import EngineBench, run_engine_bench
    from kdtree_cli.bench.gpu import device_facts, require_gpu
    from kdtree_cli.bench.kernels import default_out_dir
    from python_engine.project import PROJECT_ROOT

    if model is not None:
        from kdtree_cli.bench.rank_round import RankRoundBench, run_rank_round_bench

        if load_format not in ("checkpoint", "dummy"):
            raise typer.BadParameter(f"{load_format!r}: checkpoint or dummy", param_hint="--load-format")
        if not emulated:
            require_gpu("kdtree bench engine --model")
        out = out or (Path("/tmp/kdtree-rank-round") if emulated else
                      default_out_dir(device_facts(PROJECT_ROOT)).with_name("engine"))
        run_rank_round_bench(RankRoundBench(
            model=model, drafter=drafter, load_format=load_format, world_size=world_size, rank=rank,
            memory_limit_gib=gpu_memory_limit, dtype=dtype or "bfloat16", contexts=_ints(contexts, "--contexts"),
            batches=_ints(batches, "--batches"), budgets=_ints(budgets, "--budgets"), rounds=rounds,
            variant="emu" if emulated else "gpu", out_dir=out))
        typer.echo((out / "rank_round.md").read_text())
        return
    dtype = dtype or "float32"
    require_gpu("kdtree bench engine")
    out = out or default_out_dir(device_facts(PROJECT_ROOT)).with_name("engine")
    r = run_engine_bench(EngineBench(dtype=dtype, prompts=prompts, max_tokens=max_tokens, out_dir=out))
    typer.echo((out / "engine.md").read_text())
    if not all(r["identical_to_ar"].values()) and dtype == "float32":
        raise typer.Exit(1)


def _several_gpus_out(command: str, n: int, out: Optional[Path]) -> Path:
    """Checks there is a GPU; the output folder: --out, else results/<device>x<N>/gpus/."""
    from kdtree_cli.bench.gpu import device_facts, require_gpu
    from kdtree_cli.bench.kernels import default_out_dir
    from python_engine.project import PROJECT_ROOT

    require_gpu(command)
    if out is not None:
        return out
    one = default_out_dir(device_facts(PROJECT_ROOT)).parent
    return one.with_name(f"{one.name}x{n}") / "gpus"


@bench_app.command("gpus", help="The native engine whole on 1 GPU and split over --gpus N (NCCL, a process per "
                   "GPU), on the demo pair and a random Kimi K2-shaped slice (written by this command): DDTree "
                   "float32 output equal token for token, tokens/s and round stage times with the collectives' "
                   "share, float32 and bf16. Writes gpus.json and gpus.md.")
def gpus(
    n: Annotated[int, typer.Option("--gpus", help="GPUs to split over (compared with 1).", min=2)] = 2,
    prompts: Annotated[int, typer.Option(help="Requests, decoded together.", min=1)] = 8,
    max_tokens: Annotated[int, typer.Option(help="Tokens per request.", min=1)] = 64,
    budget: Annotated[int, typer.Option(help="DDTree node budget.", min=1)] = 32,
    models: Annotated[str, typer.Option(help="Comma-separated: demo, kimi.")] = "demo,kimi",
    scratch: Annotated[Path, typer.Option(help="Where the Kimi slice is written (removed afterwards).",
                                          file_okay=False)] = Path("/tmp/kdtree-gpus-bench"),
    out: Annotated[Optional[Path], typer.Option(
        "--out", help="Output folder \\[default: results/<device>x<N>/gpus].", file_okay=False, show_default=False)] = None,
) -> None:
    from kdtree_cli.bench.gpus import GpusBench, run_gpus_bench

    out = _several_gpus_out("kdtree bench gpus", n, out)
    r = run_gpus_bench(GpusBench(gpus=n, prompts=prompts, max_tokens=max_tokens, budget=budget,
                                 models=tuple(m.strip() for m in models.split(",") if m.strip()), scratch=scratch,
                                 out_dir=out))
    typer.echo((out / "gpus.md").read_text())
    if not all(m["runs"]["float32"]["identical_to_1gpu"] for m in r["models"].values() if "float32" in m["runs"]):
        raise typer.Exit(1)


@bench_app.command("collectives", help="What one NCCL collective of the engine's sizes costs on --gpus N GPUs "
                   "(torch.distributed): the all-reduce of T x 7168 rows (bf16, float32) and the all-gather of "
                   "lm_head's logits parts, at DDTree round sizes. Writes collectives.json and collectives.md.")
def collectives(
    n: Annotated[int, typer.Option("--gpus", help="GPUs (one process each).", min=2)] = 2,
    out: Annotated[Optional[Path], typer.Option(
        "--out", help="Output folder \\[default: results/<device>x<N>/gpus].", file_okay=False, show_default=False)] = None,
) -> None:
    from kdtree_cli.bench.collectives import run_collectives_bench

    out = _several_gpus_out("kdtree bench collectives", n, out)
    run_collectives_bench(n, out)
    typer.echo((out / "collectives.md").read_text())


@bench_app.command("load", help="Load a random Kimi K2-shaped checkpoint slice (>= 10 GB, written by this command) "
                   "with the native engine and with safetensors into torch, in GB/s; GPU memory used against "
                   "the engine's report; two engines freed leave nothing behind. Writes load.json.")
def load(
    scratch: Annotated[Path, typer.Option(help="Where the checkpoint is written (removed afterwards).",
                                          file_okay=False)] = Path("/tmp/kdtree-kimi-slice"),
    out: Annotated[Optional[Path], typer.Option(
        "--out", help="Output folder \\[default: results/<device>/engine].", file_okay=False, show_default=False)] = None,
) -> None:
    import json

    from kdtree_cli.bench.gpu import device_facts, require_gpu
    from kdtree_cli.bench.kernels import default_out_dir
    from kdtree_cli.bench.load import run_load_bench
    from kdtree_cli.bench.provenance import run_record
    from python_engine.project import PROJECT_ROOT

    require_gpu("kdtree bench load")
    out = out or default_out_dir(device_facts(PROJECT_ROOT)).with_name("engine")
    r = run_load_bench(scratch)
    out.mkdir(parents=True, exist_ok=True)
    (out / "load.json").write_text(json.dumps({"run": run_record(), **r}, indent=2) + "\n")
    typer.echo(f"native {r['native_gb_per_s']:.2f} GB/s, safetensors+torch {r['torch_gb_per_s']:.2f} GB/s; "
               f"memory used {r['memory']['ratio']:.3f}x the report; left behind {r['memory']['left_behind']} bytes")


def register(app: typer.Typer) -> None:
    from kdtree_cli.bench import budget_cli, moe_cli, routing_cli, serve_cli

    moe_cli.register(bench_app)
    serve_cli.register(bench_app)
    budget_cli.register(bench_app)
    routing_cli.register(bench_app)
    app.add_typer(bench_app, name="bench")


def _ints(text: str, option: str) -> tuple[int, ...]:
    """A comma-separated list of integers >= 0 (an option's value)."""
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise typer.BadParameter(f"{text!r}: integers separated by commas", param_hint=option) from None
    if not values or min(values) < 0:
        raise typer.BadParameter(f"{text!r}: one or more integers >= 0", param_hint=option)
    return values
