"""--host: run this same command on a host from kdtree.toml (its deployed release), streaming
the output back. The remote command line is rebuilt from what click parsed of this one (never
by re-reading sys.argv, which holds something else when kdtree is called from Python), so every
command forwards its options the same way: those given, in declaration order, minus the ones
that only mean something here (--host itself, local output folders)."""

from __future__ import annotations

from collections.abc import Sequence

import typer


def forwarded_args(ctx: typer.Context, drop: Sequence[str] = ()) -> list[str]:
    """The options of this invocation, minus the parameters named in `drop`, as a command line
    for a child run (under the monitor, or on a remote host): only values given on the command
    line or in the environment, never defaults. (Checked by name, not by class: typer may carry
    its own copy of click.)"""
    out: list[str] = []
    for param in ctx.command.params:
        if param.param_type_name != "option" or param.name in drop:
            continue
        source = ctx.get_parameter_source(param.name)
        if source is None or source.name in ("DEFAULT", "DEFAULT_MAP"):
            continue
        value = ctx.params[param.name]
        if param.is_flag:
            if value:
                out.append(param.opts[0])
            elif param.secondary_opts:
                out.append(param.secondary_opts[0])
            continue
        for item in (value if param.multiple else [value]):
            out += [param.opts[0], str(item)]
    return out


def command_words(ctx: typer.Context) -> list[str]:
    """The subcommand names from the program down to this command: ["bench", "kernels"]."""
    words = []
    while ctx.parent is not None:
        words.append(ctx.info_name)
        ctx = ctx.parent
    return words[::-1]


def run_on_host(host: str, command: Sequence[str], args: Sequence[str]) -> None:
    """`kdtree COMMAND ARGS` on `host`, its lines printed as they arrive; a failing remote run
    exits with its status."""
    from remote.exec import run_kdtree

    status = run_kdtree(host, [*command, *args])
    if status != 0:
        raise typer.Exit(status)


def forward_to_host(ctx: typer.Context, host: str, drop: Sequence[str] = (), rest: Sequence[str] = ()) -> None:
    """Run this invocation on `host`: its given options but --host and `drop`, then `rest`
    (e.g. "--" and the arguments meant for pytest)."""
    run_on_host(host, command_words(ctx), [*forwarded_args(ctx, ("host", *drop)), *rest])
