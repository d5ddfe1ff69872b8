"""`kdtree hosts`: list the inventory's hosts and check each one (reachable, Python, nvcc,
GPUs, arch, current release); the work is in remote/probe.py."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from python_engine.errors import KdtreeError


def hosts(
    names: Annotated[Optional[list[str]], typer.Argument(help="Hosts to show (default: all).", show_default=False)] = None,
    check: Annotated[bool, typer.Option("--check/--no-check", help="Connect and check each host.")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    accept_new_host_key: Annotated[bool, typer.Option("--accept-new-host-key", help="Add unknown hosts' keys to known_hosts (a changed key is always refused).")] = False,
    config: Annotated[Optional[Path], typer.Option("--config", help="Project inventory file (default: kdtree.toml of this project).",
                                                   envvar="KDTREE_CONFIG", show_default=False)] = None,
) -> None:
    """List the remote hosts and check what each one has.

    For each host: reachable, Python, nvcc, GPUs and arch, the current release, and what a deploy's environment step would install there (with its download size). A host of the project's kdtree.toml that this machine cannot resolve (ct200 on a fresh clone) is shown as an example to configure and does not fail the command, unless named on the command line.
    """
    try:
        _hosts(names, check, as_json, accept_new_host_key, config)
    except KdtreeError as exc:  # printed here, escaped: messages hold [hosts.x] and [ip]:port
        from rich.console import Console
        from rich.markup import escape

        Console(stderr=True, highlight=False).print(f"[bold red]error:[/] {escape(str(exc))}")
        raise typer.Exit(1) from None


def _hosts(names, check, as_json, accept_new_host_key, config) -> None:
    import json

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from remote.inventory import load_inventory

    inventory = load_inventory(config)
    selected = [inventory.get(n) for n in names] if names else list(inventory.hosts.values())
    console = Console(highlight=False)
    if not selected:
        files = ", ".join(str(f) for f in inventory.files) or "no kdtree.toml or hosts.toml found"
        raise KdtreeError(f"no hosts configured ({files}); add a [hosts.NAME] table to kdtree.toml")

    if not check:
        rows = [{"name": h.name, "target": h.describe_target(), "dir": h.dir, "arch": h.arch_str,
                 "gpus": h.gpus, "python": h.python, "source": h.source} for h in selected]
        if as_json:
            print(json.dumps(rows, indent=1))
            return
        table = Table(title="kdtree hosts", title_justify="left")
        for col in ("host", "ssh", "dir", "arch", "gpus", "python", "defined in"):
            table.add_column(col)
        for r in rows:
            table.add_row(*(escape(str(v)) for v in (r["name"], r["target"], r["dir"], r["arch"] or "-",
                                                      r["gpus"], r["python"], r["source"])))
        console.print(table)
        return

    from remote.parallel import for_each
    from remote.probe import check_host, checks_to_json

    checks = [o.value for o in for_each(selected, lambda h: check_host(h, accept_new_host_key=accept_new_host_key))]
    for c, h in zip(checks, selected):
        c.example = _is_example(c, h, names)
    if as_json:
        print(checks_to_json(checks))
    else:
        table = Table(title="kdtree hosts", title_justify="left")
        for col in ("host", "ssh", "reachable", "python", "nvcc", "gpus", "arch", "current", "env", "status"):
            table.add_column(col)
        for c in checks:
            table.add_row(escape(c.name), escape(c.target), "[green]yes[/]" if c.reachable else "[red]no[/]",
                          *(escape(v) for v in (c.python, c.nvcc, c.gpus, c.arch, c.current, c.env)),
                          "[green]ok[/]" if c.ok else "[yellow]example[/]" if c.example
                          else f"[red]{len(c.problems)} problem(s)[/]")
        console.print(table)
        for c in checks:
            if c.env_plan:
                console.print(f"{escape(c.name)}: a deploy's environment step: {escape(c.env_plan)}", soft_wrap=True)
        for c, h in zip(checks, selected):
            if c.example:
                console.print(f"[yellow]example:[/] {escape(_configure_hint(h))}", soft_wrap=True)
                continue
            for problem in c.problems:
                console.print(f"[red]problem:[/] {escape(problem)}", soft_wrap=True)
    if not all(c.ok or c.example for c in checks):
        raise typer.Exit(1)


def _is_example(check, host, names) -> bool:
    """A host of the project's kdtree.toml (ct200) that this machine knows nothing about: its
    name or alias resolves nowhere, the user's hosts.toml does not name it, and it was not
    asked for by name. A newcomer sees what to configure, and `kdtree hosts` still passes."""
    from remote.inventory import user_inventory_path

    return (check.unresolved and str(user_inventory_path()) not in host.source.split(" + ")
            and host.name not in (names or ()))


def _configure_hint(host) -> str:
    from remote.inventory import user_inventory_path

    return (f"{host.name} is an example host from {host.source}, not configured on this machine "
            f"({host.target!r} resolves to no address). To use it, add `Host {host.target}` with its "
            f"HostName and User to ~/.ssh/config, or a [hosts.{host.name}] table with ssh = \"YOUR-ALIAS\" "
            f"to {user_inventory_path()}")


def register(app: typer.Typer) -> None:
    app.command("hosts")(hosts)
