"""A host's remote paths, resolved once per connection: `~/x` and relative paths in the
inventory become absolute paths under the remote $HOME (a quoted `~` would not expand)."""

from __future__ import annotations

from dataclasses import dataclass

from fabric import Connection

from remote import channel
from remote.errors import RemoteEnvError
from remote.inventory import HostConfig
from remote.releases import RemoteLayout
from remote.shell import expand_home


@dataclass(frozen=True)
class RemotePaths:
    dir: str
    python: str  # the base interpreter (preflight, venv creation, release_tool)
    nvcc: str
    cuda_home: str | None

    @property
    def layout(self) -> RemoteLayout:
        return RemoteLayout(self.dir)


def remote_home(conn: Connection) -> str:
    home = channel.run_checked(conn, 'printf "%s" "$HOME"', what="reading $HOME").text
    if not home.startswith("/"):
        raise RemoteEnvError(f"{conn.host}: the remote $HOME is {home!r}, not an absolute path")
    return home


def resolve_paths(conn: Connection, host: HostConfig) -> RemotePaths:
    home = remote_home(conn)

    def program(p: str) -> str:  # a bare name stays a name, looked up on the remote PATH
        return expand_home(p, home) if ("/" in p or p.startswith("~")) else p

    return RemotePaths(
        dir=expand_home(host.dir, home).rstrip("/") or "/",
        python=program(host.python),
        nvcc=program(host.nvcc_path),
        cuda_home=expand_home(host.cuda_home, home) if host.cuda_home else None,
    )
