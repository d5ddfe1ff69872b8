"""Release directories, from the local side: each function is one call of release_tool.py
on the remote (see its docstring for the layout) over an open Connection.

The order a deploy uses them in, and why it is safe to cut the connection anywhere:
    stage -> upload -> finalize     all inside releases/.partial-<name>, then one rename
    (build, test)                   inside releases/<name>; current untouched
    switch                          one rename(2) of a fresh symlink over `current`
    prune                           only releases that are neither current nor newest
Until switch, `current` and the release it names are never written to.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from fabric import Connection

from remote import channel, transfer
from remote.errors import RemoteCommandError
from remote.manifest import MANIFEST_NAME, Manifest, SyncPlan
from remote.shell import join, q, rpath

TOOL_SOURCE = Path(__file__).with_name("release_tool.py").read_text()


@dataclass(frozen=True)
class RemoteLayout:
    dir: str  # absolute remote path of the host's directory

    @property
    def releases(self) -> str:
        return rpath(self.dir, "releases")

    @property
    def current(self) -> str:
        return rpath(self.dir, "current")

    @property
    def lock(self) -> str:
        return rpath(self.dir, ".deploy.lock")

    @property
    def envs(self) -> str:
        return rpath(self.dir, "envs")

    def env(self, key: str) -> str:
        """A Python environment, named by the hash of what it holds (pyenv.py)."""
        return rpath(self.envs, key)

    @property
    def wheels(self) -> str:
        return rpath(self.dir, "wheels")

    def release(self, name: str) -> str:
        return rpath(self.releases, name)


def tool_command(python: str, command: str, args: dict | None = None, *, site: bool = False) -> str:
    # -I -S: isolated from the remote's PYTHON* variables and site-packages (the tool needs
    # only the standard library), and 4x faster to start where site-packages is heavy.
    # site=True keeps `site` (it is what sets sys.prefix inside a venv)
    flags = ["-I"] if site else ["-I", "-S"]
    return join([python, *flags, "-c", TOOL_SOURCE, command, json.dumps(args or {})])


def call_tool(conn: Connection, python: str, command: str, args: dict | None = None, *,
              stdin: bytes | None = None, what: str, site: bool = False) -> dict:
    result = channel.run_checked(conn, tool_command(python, command, args, site=site),
                                 stdin=stdin, what=what, timeout=None)
    lines = result.text.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError):
        raise RemoteCommandError(f"{conn.host}: {what}: unexpected answer {result.text[-500:]!r}") from None


def release_name(manifest: Manifest, now: float | None = None) -> str:
    """`<UTC time to the microsecond>-<tree hash>`: sorts by time (pruning keeps the newest by
    name, and two deploys can land in the same second), and says which tree it holds."""
    now = time.time() if now is None else now
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
    micros = int((now % 1) * 1_000_000)  # truncated: never rolls over into the next second
    return f"{stamp}.{micros:06d}Z-{manifest.tree_hash()[:12]}"


def ensure_dir(conn: Connection, path: str) -> None:
    channel.run_checked(conn, f"mkdir -p -- {q(path)}", what=f"creating {path}")


@dataclass
class RemoteState:
    current: str | None
    current_ok: bool  # current names a complete release
    releases: list[str]
    partials: list[str]
    base: str | None  # the newest complete release, current or not: the next one starts from it
    manifest: Manifest | None  # of base


def read_state(conn: Connection, python: str, layout: RemoteLayout, *, with_manifest: bool = True) -> RemoteState:
    raw = call_tool(conn, python, "state", {"dir": layout.dir, "manifest": with_manifest},
                    what="reading the remote releases")
    return RemoteState(raw["current"], raw["current_ok"], raw["releases"], raw["partials"],
                       raw["base"], Manifest.from_json(raw.get("manifest")))


@dataclass
class Staged:
    name: str  # final release name (a suffix is added if the name was taken)
    partial: str  # remote path being assembled
    reused: int  # unchanged files copied from the base release, hashes checked
    missing: list[str]  # unchanged by hash, but not intact in the base release: upload
    carried: list[str]


def stage(conn: Connection, python: str, layout: RemoteLayout, name: str, base: str | None,
          plan: SyncPlan, manifest: Manifest, carry: tuple[str, ...]) -> Staged:
    """Start the new release from base (RemoteState.base): its unchanged files, hash-checked,
    and its carried folders (build/)."""
    request = {
        "dir": layout.dir,
        "name": name,
        "prev": base,
        "reuse": [[p, manifest.files[p].sha256, manifest.files[p].mode] for p in plan.reuse]
        if base else [],
        "carry": list(carry) if base else [],
    }
    raw = call_tool(conn, python, "stage", stdin=json.dumps(request).encode(),
                    what="staging the new release")
    return Staged(raw["name"], raw["partial"], raw["reused"], raw["missing"],
                  raw["carried"])


def upload(conn: Connection, python: str, partial: str, root: Path, paths: list[str],
           manifest: Manifest, manifest_text: str,
           on_bytes: Callable[[int], None] | None = None) -> None:
    """Send the changed files and the release manifest into the partial release."""
    members = []
    for rel in paths:
        entry = manifest.files[rel]
        if entry.link is not None:
            members.append(transfer.Member(rel, 0, link=entry.link))
        else:
            members.append(transfer.Member(rel, entry.mode, path=Path(root) / rel, sha256=entry.sha256))
    members.append(transfer.Member(MANIFEST_NAME, 0o644, data=manifest_text.encode()))
    transfer.upload_tar(conn, tool_command(python, "extract", {"dest": partial}), members,
                        what="uploading changed files", on_bytes=on_bytes)


def finalize(conn: Connection, python: str, layout: RemoteLayout, name: str) -> str:
    raw = call_tool(conn, python, "finalize", {"dir": layout.dir, "name": name},
                    what="checking and completing the release")
    return raw["release"]


def switch(conn: Connection, python: str, layout: RemoteLayout, name: str) -> str | None:
    """Make releases/<name> current; returns the release that was current before."""
    raw = call_tool(conn, python, "switch", {"dir": layout.dir, "name": name},
                    what="switching current")
    return raw["previous"]


def prune(conn: Connection, python: str, layout: RemoteLayout, keep: int) -> list[str]:
    """Drop old releases, then the environments no remaining release uses."""
    raw = call_tool(conn, python, "prune", {"dir": layout.dir, "keep": keep},
                    what="removing old releases")
    return raw["removed"]


def remote_files(conn: Connection, python: str, folder: str) -> dict[str, dict]:
    return call_tool(conn, python, "files", {"dir": folder}, what=f"listing {folder}")["files"]


def fetch_dir(conn: Connection, python: str, remote_dir: str, dest: Path) -> list[str]:
    """Copy remote_dir's contents into dest; returns warnings for skipped members."""
    return transfer.download_tar(conn, tool_command(python, "pack", {"src": remote_dir}), dest,
                                 what=f"fetching {remote_dir}")
