"""`kdtree deploy HOST [HOST...]`: sync the tree to each host, build and test it there, and
fetch the results into results/<host>/ on success (the work is in remote/deploy.py; where
files go, in remote/results.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from python_engine.errors import KdtreeError


def deploy(
    hosts: Annotated[list[str], typer.Argument(help="Host names from kdtree.toml / ~/.config/kdtree/hosts.toml.",
                                               show_default=False)],
    no_build: Annotated[bool, typer.Option("--no-build", help="Skip the remote `kdtree build` (and the nvcc check).")] = False,
    no_test: Annotated[bool, typer.Option("--no-test", help="Skip the remote `kdtree test`.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Connect and show what would be uploaded and run; change nothing.")] = False,
    keep: Annotated[Optional[int], typer.Option("--keep", min=1, help="Releases to keep on each host (default: the host's `keep`, 5).",
                                                show_default=False)] = None,
    wheels: Annotated[Optional[Path], typer.Option("--wheels", help="Folder of wheels to upload; the remote venv installs from them with no index (offline remotes).",
                                                   show_default=False)] = None,
    accept_new_host_key: Annotated[bool, typer.Option("--accept-new-host-key", help="Add an unknown host's key to known_hosts (a changed key is always refused).")] = False,
    config: Annotated[Optional[Path], typer.Option("--config", help="Project inventory file (default: kdtree.toml of this project).",
                                                   envvar="KDTREE_CONFIG", show_default=False)] = None,
    results: Annotated[Optional[Path], typer.Option("--results", help="Where results/<host>/ go (default: <project>/results). "
                                                    "It is replaced only when the deploy succeeds; a failed deploy's logs and "
                                                    "reports stay in $XDG_STATE_HOME/kdtree/deploy/ (~/.local/state/...), named in the error.",
                                                    show_default=False)] = None,
) -> None:
    """Sync the tree to HOSTs (in parallel), build and test there, fetch the results."""
    try:
        _deploy(hosts, no_build, no_test, dry_run, keep, wheels, accept_new_host_key, config, results)
    except KdtreeError as exc:  # printed here, escaped: messages hold [hosts.x] and [ip]:port
        from rich.console import Console
        from rich.markup import escape

        Console(stderr=True, highlight=False).print(f"[bold red]error:[/] {escape(str(exc))}")
        raise typer.Exit(1) from None


def _deploy(hosts, no_build, no_test, dry_run, keep, wheels, accept_new_host_key, config, results) -> None:
    from rich.console import Console

    from remote.deploy import DeployOptions, deploy_host
    from remote.inventory import find_project_root, load_inventory
    from remote.output import ConsoleReporter
    from remote.parallel import for_each

    root = find_project_root()
    inventory = load_inventory(config)
    targets = [inventory.get(name) for name in dict.fromkeys(hosts)]
    opts = DeployOptions(
        project_root=root, results_root=results or root / "results", build=not no_build,
        test=not no_test, dry_run=dry_run, keep=keep, wheels=wheels,
        accept_new_host_key=accept_new_host_key,
    )
    reporter = ConsoleReporter()
    outcomes = for_each(targets, lambda h: deploy_host(h, opts, reporter))
    host_results = [o.value for o in outcomes]
    Console(highlight=False).print(summary_table(host_results, dry_run))
    failed = [r for r in host_results if not r.ok]
    if failed:
        lines = "\n".join(f"  {r.error}" if r.error.startswith(r.host) else f"  {r.host}: {r.error}"
                          for r in failed)
        raise KdtreeError(f"deploy failed on {len(failed)} of {len(host_results)} host(s):\n{lines}")


def summary_table(host_results, dry_run: bool):
    from rich.table import Table

    table = Table(title="kdtree deploy" + (" (dry run)" if dry_run else ""), title_justify="left")
    for col in ("host", "status", "release", "uploaded", "steps", "skipped", "results"):
        table.add_column(col)
    from rich.markup import escape

    for r in host_results:
        status = "[green]ok[/]" if r.ok else "[red]FAILED[/]"
        if r.ok and not dry_run:
            status += " (current)" if r.switched else ""
        steps = ", ".join(f"{s.name} {'ok' if s.ok else 'FAILED'} {s.seconds:.0f}s" for s in r.steps) or "-"
        uploaded = (f"{len(r.plan['upload'])} files; env: {r.plan['env']}" if r.plan else
                    f"{r.uploaded} files, {r.upload_bytes / 1e6:.1f} MB" if r.release else "-")
        skipped = "; ".join(f"{name}: {why}" for name, why in r.skipped.items()) or "-"
        table.add_row(escape(r.host), status, escape(r.release or "-"), uploaded, steps, escape(skipped),
                      escape(r.results_dir or "-"))
    return table


def register(app: typer.Typer) -> None:
    app.command("deploy")(deploy)
