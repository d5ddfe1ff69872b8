"""`kdtree test`: run the Python test suite (pytest), or with --native the native test programs,
or with --gpu-suites the native engine's pytest suites against the GPU engine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from kdtree_cli.host_forwarding import forward_to_host
from kdtree_cli.native_build.gpu_suites import ALL as ALL_GPU_SUITES, suites_help
from python_engine.errors import KdtreeError
from python_engine.project import PROJECT_ROOT


MAX_DEFAULT_JOBS = 8  # past this, the suite's longest tests bound the time, not the cores


def default_jobs() -> int:
    """The cores this process may use (CI's box: 2), at most MAX_DEFAULT_JOBS."""
    return max(1, min(len(os.sched_getaffinity(0)), MAX_DEFAULT_JOBS))


def pytest_command(args: list[str], jobs: int) -> list[str]:
    """pytest with the given arguments, spread over `jobs` processes by pytest-xdist unless
    jobs is 1 or the arguments already choose (-n, --numprocesses, -p no:xdist)."""
    chosen = any(a in ("-n", "--numprocesses", "no:xdist") or a.startswith(("-n", "--numprocesses="))
                 for a in args)
    spread = [] if jobs == 1 or chosen else ["-n", str(jobs)]
    return [sys.executable, "-m", "pytest", *spread, *args]


def run_pytest(args: list[str], jobs: int = 1) -> int:
    """Run pytest from the project root with the given extra arguments; returns its status."""
    return subprocess.call(pytest_command(args, jobs), cwd=PROJECT_ROOT)


def test(
    ctx: typer.Context,
    pytest_args: Annotated[
        Optional[list[str]],
        typer.Argument(help="Extra arguments for pytest (after --), e.g. -- -k tree -x.",
                       show_default=False),
    ] = None,
    everything: Annotated[
        bool, typer.Option("--all", help="Both: the Python tests, then the native tests "
                           "(what CI runs).")
    ] = False,
    native: Annotated[
        bool, typer.Option("--native", help="Build (kdtree build) and run the native test programs "
                           "csrc/tests/test_* instead of pytest; report their totals.")
    ] = False,
    arch: Annotated[
        Optional[str], typer.Option("--arch", help="With --native: CUDA targets, as for kdtree build.",
                                    show_default=False),
    ] = None,
    profile: Annotated[str, typer.Option("--profile", help="With --native: release or debug.")] = "release",
    cuda_home: Annotated[
        Optional[str], typer.Option("--cuda-home", help="With --native: CUDA toolkit directory.",
                                    show_default=False),
    ] = None,
    sanitize: Annotated[
        Optional[str], typer.Option("--sanitize", help="With --native: after the tests, run the GPU test programs "
                                    "(small cases) under compute-sanitizer with these tools: memcheck, racecheck, "
                                    "initcheck, synccheck, comma-separated, or all (the first three). racecheck checks a build "
                                    "of its own (build-racecheck/: verify_attn's seesaw with bar.sync for bar.arrive, "
                                    "whose hand-offs racecheck misreads). Needs a GPU.",
                                    show_default=False),
    ] = None,
    large: Annotated[
        bool, typer.Option("--large", help="With --native: also run the large generated cases (attention up to "
                           "131072 keys against float64 references, 400 tie-heavy tree and top-K cases), drawn "
                           "fresh from --seed. Needs a GPU and torch.")
    ] = False,
    seed: Annotated[
        Optional[int], typer.Option("--seed", help="With --large: the seed (default: fresh, printed).",
                                    show_default=False),
    ] = None,
    gpu_suites: Annotated[
        Optional[str], typer.Option(
            "--gpu-suites", metavar="SUITES", show_default=False,
            help="Run the native engine's pytest suites against the real GPU engine (KDTREE_NATIVE_VARIANT=gpu: "
            "lib/libkdtree_engine.so, built first, on the CUDA device, the torch reference on CUDA, at full "
            f"sizes), comma-separated, or {ALL_GPU_SUITES} (every one but int4, which decode holds). "
            f"{suites_help()} Needs a CUDA device: without one it stops before running anything. Each suite's "
            "output goes to --log-dir as gpu-suite-NAME.log, with gpu-suites.json and gpu-suites.md (command, "
            "commit, device, date; per suite passed, failed, errors, skipped, seconds) and native-results.jsonl "
            "(what the cases recorded). With --native the native test programs run first.")
    ] = None,
    log_dir: Annotated[
        Optional[Path], typer.Option("--log-dir", help="With --native or --gpu-suites: write each program's or "
                                     "suite's output here \\[default: build/<profile>/test-logs].",
                                     file_okay=False, show_default=False),
    ] = None,
    host: Annotated[
        Optional[str], typer.Option("--host", help="Run them on this host from kdtree.toml (its "
                                    "deployed release), streaming the output back.", show_default=False),
    ] = None,
    jobs: Annotated[
        Optional[int], typer.Option("--jobs", "-j", min=1, show_default=False,
                                    help="Pytest processes (pytest-xdist) \\[default: the cores this process "
                                         "may use, at most 8]. 1 runs plain pytest (for -s or --pdb).")
    ] = None,
    seed_sweep: Annotated[
        Optional[int], typer.Option("--seed-sweep", min=1, metavar="N", show_default=False,
                                    help="Run each test that draws random inputs (one taking the seed fixture) "
                                         "once for each of N seeds, and no other test: a test must hold for every "
                                         "seed. A failing case's id names its seed (KDTREE_SEED=SEED replays it); "
                                         "e.g. --seed-sweep 200 -- tests/model tests/decode.")
    ] = None,
) -> None:
    """Run the tests (pytest; extra arguments go to pytest), the native ones (--native), or the
    engine's suites on the GPU (--gpu-suites)."""
    if (sanitize or large) and not native:
        raise KdtreeError("--sanitize and --large go with --native")
    if log_dir and not (native or gpu_suites):
        raise KdtreeError("--log-dir goes with --native or --gpu-suites")
    if seed_sweep and native and not everything:
        raise KdtreeError("--seed-sweep runs pytest's tests: drop --native (or use --all)")
    if gpu_suites is not None:
        from kdtree_cli.native_build.gpu_suites import parse_gpu_suites

        suites = parse_gpu_suites(gpu_suites)
        if everything or seed_sweep:
            raise KdtreeError("--gpu-suites runs its own pytest suites: drop --all and --seed-sweep "
                              "(--native runs the native test programs first)")
        if pytest_args:
            raise typer.BadParameter(
                f"{' '.join(pytest_args)!r} would go to pytest, but --gpu-suites runs the named suites as they are "
                f"defined: drop them, or run pytest yourself with KDTREE_NATIVE_VARIANT=gpu", param_hint="PYTEST_ARGS")
    if host:
        forward_to_host(ctx, host, drop=("log_dir",), rest=["--", *pytest_args] if pytest_args else [])
        return
    if gpu_suites is not None:
        run_gpu_suites_after_native(suites, native, arch, profile, cuda_home, sanitize, large, seed, log_dir)
        return
    if native and not everything:
        if pytest_args:
            raise typer.BadParameter(
                f"{' '.join(pytest_args)!r} would go to pytest, but --native runs only the native "
                f"test programs: use --all (pytest with these arguments, then the native tests), "
                f"or drop --native", param_hint="PYTEST_ARGS")
        run_native(arch, profile, cuda_home, sanitize, large, seed, log_dir)
        return
    sweep = ["--seed-sweep", str(seed_sweep)] if seed_sweep else []
    status = run_pytest(sweep + (pytest_args or []), jobs or default_jobs())
    if status != 0:
        raise typer.Exit(status)
    if everything:
        run_native(arch, profile, cuda_home, sanitize, large, seed, log_dir)


def run_gpu_suites_after_native(suites, native: bool, arch: Optional[str], profile: str, cuda_home: Optional[str],
                                sanitize: Optional[str], large: bool, seed: Optional[int],
                                log_dir: Optional[Path]) -> None:
    """--gpu-suites: check for a GPU before anything runs, the native programs first with --native
    (their failure does not stop the suites), then build the GPU engine and run the suites."""
    from rich.console import Console

    from kdtree_cli.native_build.driver import BuildRequest, build
    from kdtree_cli.native_build.gpu_suites import require_gpu_suites_ready, run_gpu_suites

    require_gpu_suites_ready()
    status = 0
    if native:
        try:
            run_native(arch, profile, cuda_home, sanitize, large, seed, log_dir)
        except typer.Exit as exc:
            status = exc.exit_code
    err = Console(stderr=True, soft_wrap=True)
    # the suites load build/release's library (python_engine/native/library.py), whatever --profile says
    outcome = build(BuildRequest(arch=arch, cuda_home=cuda_home, targets=("engine",)), console=err)
    results = run_gpu_suites(suites, log_dir or outcome.configured.build_dir / "test-logs", err)
    if status or not all(r.ok for r in results):
        raise typer.Exit(status or 1)


def run_native(arch: Optional[str], profile: str, cuda_home: Optional[str], sanitize: Optional[str] = None,
               large: bool = False, seed: Optional[int] = None, log_dir: Optional[Path] = None) -> None:
    import tempfile

    from rich.console import Console

    from kdtree_cli.native_build.arch import detect_gpu_archs
    from kdtree_cli.native_build.driver import BuildRequest
    from kdtree_cli.native_build.native_tests import run_native_tests

    err = Console(stderr=True, soft_wrap=True)
    tools = None
    if sanitize:
        from kdtree_cli.native_build.sanitize import parse_tools

        tools = parse_tools(sanitize)
    if (tools or large) and not detect_gpu_archs():
        what = " and ".join(x for x in ("--sanitize" if tools else "", "--large" if large else "") if x)
        raise KdtreeError(f"kdtree test --native {what} needs a CUDA GPU and nvidia-smi lists none here; run it on "
                          "a GPU machine, or on a deployed host with --host HOST")
    request = BuildRequest(profile=profile, arch=arch, cuda_home=cuda_home)
    with tempfile.TemporaryDirectory(prefix="kdtree-large-cases-") as scratch:
        extra_env = None
        if large:
            from kdtree_cli.native_build.large_cases import fresh_seed, write_large_cases

            seed = fresh_seed() if seed is None else seed
            err.print(f"large cases: seed {seed} (kdtree test --native --large --seed {seed} repeats them)",
                      highlight=False)
            extra_env = write_large_cases(Path(scratch), seed)
        results = run_native_tests(request, console=err, extra_env=extra_env, log_dir=log_dir)
    if not results:
        raise KdtreeError("no native test programs (csrc/tests/test_*.cpp or .cu) to run")
    ok = all(r.ok for r in results)
    if tools:
        from kdtree_cli.native_build.sanitize import run_sanitizers

        ok = all(r.ok for r in run_sanitizers(request, tools, console=err, log_dir=log_dir)) and ok
    if not ok:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("test", context_settings={"ignore_unknown_options": True,
                                          "allow_extra_args": True})(test)
