"""`kdtree test`: run the Python test suite (pytest), or with --native the native test programs."""

from __future__ import annotations

import subprocess
import sys
from typing import Annotated, Optional

import typer

from python_engine.project import PROJECT_ROOT


def run_pytest(args: list[str]) -> int:
    """Run pytest from the project root with the given extra arguments; returns its status."""
    return subprocess.call([sys.executable, "-m", "pytest", *args], cwd=PROJECT_ROOT)


def test(
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
    host: Annotated[
        Optional[str], typer.Option("--host", help="Run them on this host from kdtree.toml (its "
                                    "deployed release), streaming the output back.", show_default=False),
    ] = None,
) -> None:
    """Run the tests (pytest; extra arguments go to pytest), or the native ones (--native)."""
    if host:
        from remote.exec import run_kdtree

        options = [("--all", everything), ("--native", native), ("--arch", arch), ("--cuda-home", cuda_home),
                   ("--profile", profile if profile != "release" else None)]
        args = ["test"] + [a for name, value in options if value
                           for a in ((name,) if value is True else (name, value))]
        status = run_kdtree(host, args + (["--", *pytest_args] if pytest_args else []))
        if status != 0:
            raise typer.Exit(status)
        return
    if native and not everything:
        if pytest_args:
            raise typer.BadParameter(
                f"{' '.join(pytest_args)!r} would go to pytest, but --native runs only the native "
                f"test programs: use --all (pytest with these arguments, then the native tests), "
                f"or drop --native", param_hint="PYTEST_ARGS")
        run_native(arch, profile, cuda_home)
        return
    status = run_pytest(pytest_args or [])
    if status != 0:
        raise typer.Exit(status)
    if everything:
        run_native(arch, profile, cuda_home)


def run_native(arch: Optional[str], profile: str, cuda_home: Optional[str]) -> None:
    from rich.console import Console

    from kdtree_cli.native_build.driver import BuildRequest
    from kdtree_cli.native_build.native_tests import run_native_tests
    from python_engine.errors import KdtreeError

    results = run_native_tests(BuildRequest(profile=profile, arch=arch, cuda_home=cuda_home),
                               console=Console(stderr=True, soft_wrap=True))
    if not results:
        raise KdtreeError("no native test programs (csrc/tests/test_*.cpp or .cu) to run")
    if not all(r.ok for r in results):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("test", context_settings={"ignore_unknown_options": True,
                                          "allow_extra_args": True})(test)
