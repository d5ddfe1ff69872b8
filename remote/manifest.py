"""What a deploy sends, and how it knows what changed.

The synced tree is: the files git tracks, plus untracked files git does not ignore, plus
everything under refs/ (reference bundles, even when ignored); never build/, build-*/,
.venv/, results/, .git/, __pycache__/ or what tools generate there (GENERATED). A release
on a host has no .git: there the files are those of its own manifest (what the deploy that
made it sent), so what its steps generate (compile_commands.json, caches, build outputs)
is never sent on from it. Any other folder outside a git work tree is walked with the
exclusions above.

A manifest maps each relative path to its content hash (sha256), size and mode (0o755 or
0o644; symlinks keep their target). Each release on a remote carries the manifest it was
made from (MANIFEST_NAME), so the next deploy uploads only the entries whose hash or mode
differ, and copies the others from the previous release (checking their hashes on the
way). A symlink must point inside the tree: one that leaves it (absolute, or `..` past the
root) is refused here, with its path, before anything is sent.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import posixpath
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from remote.errors import RemoteError

MANIFEST_NAME = ".kdtree-release.json"
ALWAYS_INCLUDED = ("refs",)
NEVER_SYNCED_DIRS = (".git", ".venv", "build", "results")  # and build-* (see _excluded)
# What tools write into the tree, never sent even from a folder git does not describe:
# `kdtree build`'s copy of compile_commands.json (for clangd; a build in the release writes
# its own), pytest's and hypothesis's caches.
GENERATED = ("compile_commands.json", ".pytest_cache", ".hypothesis")


def _excluded(rel: str) -> bool:
    parts = rel.split("/")
    return (parts[0] in NEVER_SYNCED_DIRS or parts[0].startswith("build-") or rel == MANIFEST_NAME
            or parts[0] in GENERATED or "__pycache__" in parts or rel.endswith(".pyc"))


class ManifestError(RemoteError):
    """The local tree holds something a release cannot: a symlink out of the tree."""


def check_symlink(rel: str, target: str) -> None:
    """Refuse a link whose target is absolute or climbs out of the tree."""
    inside = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
    if posixpath.isabs(target) or inside == ".." or inside.startswith("../"):
        raise ManifestError(
            f"{rel} is a symlink to {target}, outside the project tree: a release holds only the "
            f"tree, so the link would dangle there. Make it a relative link inside the tree, "
            f"replace it with the file, or let git ignore it"
        )


@dataclass(frozen=True)
class Entry:
    sha256: str
    size: int
    mode: int  # 0o755 / 0o644, or 0 for a symlink
    link: str | None = None  # symlink target

    def to_json(self) -> dict:
        out = {"sha256": self.sha256, "size": self.size, "mode": self.mode}
        if self.link is not None:
            out["link"] = self.link
        return out

    @staticmethod
    def from_json(obj: dict) -> "Entry":
        return Entry(obj["sha256"], int(obj["size"]), int(obj["mode"]), obj.get("link"))


@dataclass
class Manifest:
    files: dict[str, Entry]

    def tree_hash(self) -> str:
        h = hashlib.sha256()
        for path in sorted(self.files):
            e = self.files[path]
            h.update(f"{path}\0{e.mode:o}\0{e.link or ''}\0{e.sha256}\n".encode())
        return h.hexdigest()

    def to_json(self, **meta) -> str:
        body = {
            "version": 1,
            "tree": self.tree_hash(),
            **meta,
            "files": {p: self.files[p].to_json() for p in sorted(self.files)},
        }
        return json.dumps(body, indent=1, sort_keys=False) + "\n"

    @staticmethod
    def from_json(obj: dict | None) -> "Manifest | None":
        """A release's manifest as read back from a remote; None if missing or unreadable."""
        if not isinstance(obj, dict) or obj.get("version") != 1:
            return None
        try:
            return Manifest({p: Entry.from_json(e) for p, e in obj["files"].items()})
        except (KeyError, TypeError, ValueError):
            return None

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self.files.values())


@dataclass
class SyncPlan:
    """How a new release is assembled from the previous one and the local tree."""

    upload: list[str] = field(default_factory=list)  # new or changed: sent in the tar
    reuse: list[str] = field(default_factory=list)  # unchanged: copied from previous
    removed: list[str] = field(default_factory=list)  # in previous, not in local (dropped)

    def upload_bytes(self, manifest: Manifest) -> int:
        return sum(manifest.files[p].size for p in self.upload)


def plan_sync(local: Manifest, previous: Manifest | None) -> SyncPlan:
    plan = SyncPlan()
    prev = previous.files if previous else {}
    for path, entry in sorted(local.files.items()):
        old = prev.get(path)
        # symlinks are tiny: always send them
        if old == entry and entry.link is None:
            plan.reuse.append(path)
        else:
            plan.upload.append(path)
    plan.removed = sorted(set(prev) - set(local.files))
    return plan


def list_files(root: Path) -> list[str]:
    """Relative POSIX paths of the synced tree (see the module doc), sorted."""
    root = Path(root)
    paths: set[str] = set()
    git = _git_files(root)
    release = _release_files(root) if git is None else None
    if release is not None:
        paths.update(release)
    elif git is None:
        for folder, dirs, files in os.walk(root):
            rel_dir = Path(folder).relative_to(root).as_posix()
            rel_dir = "" if rel_dir == "." else rel_dir + "/"
            dirs[:] = [d for d in dirs if not _excluded(rel_dir + d)]
            paths.update(rel_dir + f for f in files)
    else:
        paths.update(git)
    for top in ALWAYS_INCLUDED:
        base = root / top
        if base.is_dir():
            for folder, _dirs, files in os.walk(base):
                rel_dir = Path(folder).relative_to(root).as_posix()
                paths.update(f"{rel_dir}/{f}" for f in files)
    return sorted(p for p in paths if not _excluded(p) and os.path.lexists(root / p))


def check_symlinks(root: Path) -> None:
    """The symlink check of build_manifest alone (no hashing): cheap enough to run before
    connecting anywhere."""
    for rel in list_files(root):
        if os.path.islink(Path(root) / rel):
            check_symlink(rel, os.readlink(Path(root) / rel))


def _git_files(root: Path) -> list[str] | None:
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True, check=True, timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return None  # not a git work tree (or no git): walk the folder instead
    # (inside a bigger repository, ls-files lists root's files relative to root)
    return [p for p in proc.stdout.decode("utf-8", "surrogateescape").split("\0") if p]


def _release_files(root: Path) -> list[str] | None:
    """The files of a deployed release (its manifest's), or None when root is not one."""
    try:
        manifest = Manifest.from_json(json.loads((root / MANIFEST_NAME).read_text()))
    except (OSError, ValueError):
        return None
    return list(manifest.files) if manifest is not None else None


def hash_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def build_manifest(root: Path, paths: list[str] | None = None) -> Manifest:
    root = Path(root)
    files = {}
    for rel in paths if paths is not None else list_files(root):
        full = root / rel
        st = os.lstat(full)
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(full)
            check_symlink(rel, target)
            files[rel] = Entry(hashlib.sha256(target.encode()).hexdigest(), len(target), 0, target)
        elif stat.S_ISREG(st.st_mode):
            mode = 0o755 if st.st_mode & 0o111 else 0o644
            files[rel] = Entry(hash_file(full), st.st_size, mode)
    return Manifest(files)
