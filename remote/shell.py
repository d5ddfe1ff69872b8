"""Building remote shell command lines. Every path and argument that reaches a remote shell
goes through `q` (shlex.quote), so names with spaces, quotes, `$(...)` or backticks arrive
as exactly those bytes and are never run. The only unquoted text is our own fixed syntax
(`cd`, `&&`, `export`, `"$PATH"`)."""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Iterable, Mapping

q = shlex.quote


def join(argv: Iterable[str]) -> str:
    """A command line running argv exactly."""
    return " ".join(q(str(a)) for a in argv)


def rpath(*parts: str) -> str:
    """Join remote (POSIX) path parts."""
    return posixpath.join(*parts)


def expand_home(path: str, home: str) -> str:
    """`~` / `~/x` -> the remote $HOME (quoted paths would keep the tilde literally);
    relative paths are relative to the remote home, as ssh starts there."""
    if path == "~":
        return home
    if path.startswith("~/"):
        return posixpath.join(home, path[2:])
    if not path.startswith("/"):
        return posixpath.join(home, path)
    return path


def env_exports(env: Mapping[str, str], path_prepend: Iterable[str] = ()) -> str:
    """`export A='x' B='y'` (values literal), with PATH extended by quoted folders."""
    parts = [f"{name}={q(value)}" for name, value in env.items()]
    prepend = [p for p in path_prepend if p]
    if prepend:
        parts.append("PATH=" + ":".join(q(p) for p in prepend) + ':"$PATH"')
    return "export " + " ".join(parts) if parts else ":"


def in_dir(folder: str, command: str, env: Mapping[str, str] | None = None,
           path_prepend: Iterable[str] = ()) -> str:
    """Run command (already a shell line) in folder with env; `exec` so the remote command
    itself gets the session's signals and exit status."""
    return f"cd {q(folder)} && {env_exports(env or {}, path_prepend)} && exec {command}"
