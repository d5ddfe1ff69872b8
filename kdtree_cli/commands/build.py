"""`kdtree build`: build the native engine, its tests and benchmarks (nvcc + ninja, no CMake)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

PROFILE_HELP = "release (-O3 -lineinfo) or debug (-G, host -O0 -g); each has its own build/<profile>/."


def build(
    targets: Annotated[
        Optional[list[str]],
        typer.Argument(help="What to build: a program (test_kdtr), tests, bench, libs \\[default: all].",
                       show_default=False),
    ] = None,
    arch: Annotated[
        Optional[str],
        typer.Option("--arch", help="CUDA targets: 90a,120 or names (hopper, blackwell, h200, "
                     "rtx-pro-6000, all), or auto \\[default: $KDTREE_CUDA_ARCH, else the visible GPUs, "
                     "else 90a,120].", show_default=False),
    ] = None,
    cuda_home: Annotated[
        Optional[str],
        typer.Option("--cuda-home", help="CUDA toolkit directory \\[default: $CUDA_HOME, $CUDA_PATH, "
                     "nvcc on PATH, /usr/local/cuda, /opt/cuda].", show_default=False),
    ] = None,
    profile: Annotated[str, typer.Option("--profile", help=PROFILE_HELP)] = "release",
    jobs: Annotated[
        Optional[int], typer.Option("-j", "--jobs", help="Parallel jobs \\[default: ninja's, cores + 2].",
                                    min=1, show_default=False),
    ] = None,
    build_root: Annotated[
        Optional[Path], typer.Option("--build-dir", help="Build root \\[default: <repo>/build].",
                                     file_okay=False, show_default=False),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show every command line.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the commands a build would run; build nothing.")] = False,
    list_targets: Annotated[bool, typer.Option("--list", help="List the targets and exit.")] = False,
    clean: Annotated[bool, typer.Option("--clean", help="Remove this profile's build directory and exit.")] = False,
    check_resources: Annotated[
        bool, typer.Option("--check-resources", help="Build nothing: compile the planned kernels' sources for each "
                           "--arch target alone (default 120) with ptxas -v and fail on a spill or an over-limit "
                           "request in a kernel the plans may select there (kdtree_cli/native_build/resources.py).")
    ] = False,
) -> None:
    """Build csrc/ (libraries, test and bench programs) with nvcc, driven by ninja."""
    from rich.console import Console

    from kdtree_cli.native_build import driver

    out, err = Console(soft_wrap=True), Console(stderr=True, soft_wrap=True)
    request = driver.BuildRequest(
        profile=profile, arch=arch, cuda_home=cuda_home, jobs=jobs, verbose=verbose,
        targets=tuple(targets or ()), build_root=build_root or driver.DEFAULT_BUILD_ROOT,
    )
    if check_resources:
        _check_resources(out, err, arch, cuda_home, jobs)
        return
    if clean:
        removed = driver.clean(request)
        err.print(f"removed {removed}" if removed else f"nothing to clean at {driver.build_dir_for(request)}",
                  highlight=False)
        return
    if list_targets:
        config, choice = driver.plan(request)
        _warn_passed_over(err, config.toolchain)
        _print_targets(out, config, choice)
        return
    if dry_run:
        commands, configured = driver.dry_run(request)
        _warn_passed_over(err, configured.config.toolchain)
        out.print(commands or "# nothing to do: everything is up to date", highlight=False, markup=False)
        return
    outcome = driver.build(request, console=err)
    _print_summary(err, outcome, verbose)


def _check_resources(out, err, arch: Optional[str], cuda_home: Optional[str], jobs: Optional[int]) -> None:
    from rich.markup import escape
    from rich.table import Table

    from kdtree_cli.native_build.resources import ptxas_report, short_name

    failed = 0
    for target in (arch or "120").split(","):
        verdicts = ptxas_report(target.strip().removeprefix("sm_"), cuda_home=cuda_home, jobs=jobs)
        table = Table(title=f"ptxas -v, sm_{target}", title_justify="left")
        for col in ("kernel", "regs", "spill st/ld", "smem", "verdict"):
            table.add_column(col, justify="right" if col in ("regs", "spill st/ld", "smem") else "left")
        for v in verdicts:
            k = v.kernel
            verdict = (f"[red]{escape(v.problem)}[/]" if v.problem else
                       f"[dim]not planned: {escape(v.note)}[/]" if not v.planned else
                       f"[yellow]{escape(v.note)}[/]" if v.note else "[green]ok[/]")
            table.add_row(escape(short_name(k.name)), str(k.registers), f"{k.spill_stores}/{k.spill_loads}", str(k.static_smem), verdict)
        out.print(table)
        bad = [v for v in verdicts if v.problem]
        failed += len(bad)
        out.print(f"sm_{target}: {len(verdicts)} kernels, {sum(v.planned for v in verdicts)} planned, "
                  f"{len(bad)} over their limits", highlight=False)
    if failed:
        err.print(f"[red]{failed} planned kernel(s) spill or ask for too much[/]", highlight=False)
        raise typer.Exit(1)


def _warn_passed_over(err, toolchain) -> None:
    """A toolkit the user named ($CUDA_HOME, $CUDA_PATH) that was not usable, said without
    -v: a build with another toolkit than the one asked for must not go unnoticed."""
    from rich.markup import escape

    for note in toolchain.cuda.skipped:
        if "($CUDA_HOME)" in note or "($CUDA_PATH)" in note:
            err.print(f"[yellow]warning:[/] {escape(note)}; using {escape(str(toolchain.cuda.home))} "
                      f"({escape(toolchain.cuda.found_by)}) instead", highlight=False)


def _print_targets(out, config, choice) -> None:
    layout = config.layout
    out.print(f"# {config.build_dir} (targets {choice.names})", highlight=False)
    for prog in layout.programs:
        out.print(f"{prog.name:28} {prog.output:32} csrc/{prog.source.as_posix()}", highlight=False)
    for lib in list(layout.libraries) + list(layout.support.values()):
        out.print(f"{lib.name:28} {lib.output:32} {len(lib.sources)} source(s)", highlight=False)
    groups = "all (default), tests, bench, libs"
    if layout.has_engine:
        from kdtree_cli.native_build.layout import ENGINE_EMU_LIB, ENGINE_LIB, emu_capi_output, emu_program_output

        out.print(f"{'engine':28} {ENGINE_LIB:32} the native engine: kdtree run, demo and engine-check load it",
                  highlight=False)
        out.print(f"{'engine_emu':28} {ENGINE_EMU_LIB:32} the same engine on the CPU (SIMT emulator), for tests",
                  highlight=False)
        # emulated programs and libraries: their output path is their target name
        for rel in layout.emu_capi:
            out.print(f"{emu_capi_output(rel):61} csrc/{rel.as_posix()} (emulated, for ctypes)", highlight=False)
        for rel in layout.emu_programs + layout.emu_twins:
            out.print(f"{emu_program_output(rel):61} csrc/{rel.as_posix()} (emulated)", highlight=False)
        groups += ", emu_tests (every emulated program and library)"
    out.print(f"groups: {groups}", highlight=False)


def _print_summary(err, outcome, verbose: bool) -> None:
    cfg = outcome.configured.config
    tc = cfg.toolchain
    where = f"{cfg.build_dir}"
    if outcome.steps_run == 0:
        err.print(f"[green]up to date[/] ({where}, {outcome.seconds:.2f} s)", highlight=False)
    else:
        err.print(f"[green]built[/] {outcome.steps_run} step(s) in {outcome.seconds:.1f} s -> {where}",
                  highlight=False)
    _warn_passed_over(err, tc)
    choice = outcome.configured.arch_choice
    err.print(f"[dim]{cfg.profile.name}; targets {', '.join(a.sm for a in choice.archs)} ({choice.source}); "
              f"CUDA {tc.cuda.version_str} ({tc.cuda.found_by}); cuBLAS: {tc.cublas.found_by}[/]",
              highlight=False)
    if verbose:
        for note in tc.cuda.skipped:
            err.print(f"[dim]  skipped {note}[/]", highlight=False)
    for name in outcome.configured.layout.unknown_dirs:
        err.print(f"[yellow]warning:[/] csrc/{name}/ has sources but no build rule "
                  "(see kdtree_cli/native_build/layout.py)", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("build")(build)
