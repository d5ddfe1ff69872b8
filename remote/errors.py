"""Errors of the remote layer. Each one carries a message a person can act on; the CLI
prints it as one line (KdtreeError) and, for several hosts, one line per host."""

from __future__ import annotations

from python_engine.errors import KdtreeError


class RemoteError(KdtreeError):
    """Something went wrong on or on the way to a remote host. `transient` says whether
    trying again later may work (a network problem) or a person must act first."""

    transient = False


class InventoryError(RemoteError):
    """kdtree.toml / hosts.toml is missing a host, or holds a value that cannot be used."""


class HostKeyError(RemoteError):
    """The server's host key is unknown (and not accepted) or differs from known_hosts."""


class UnreachableError(RemoteError):
    """No SSH session could be set up: DNS, TCP, banner, proxy or authentication failed.
    Transient only when the network itself failed (timeouts, refused or reset
    connections), never for authentication or configuration."""

    def __init__(self, message: str, *, transient: bool = False):
        super().__init__(message)
        self.transient = transient


class UnresolvedHostError(UnreachableError):
    """The host name (or ssh alias) resolves to no address here: nothing on this machine
    says where the host is (`kdtree hosts` shows the project's own hosts in that state as
    examples to configure)."""


class ConnectionLostError(RemoteError):
    """The SSH connection dropped while a step was running."""

    transient = True


class RemoteCommandError(RemoteError):
    """A remote command exited with a non-zero status."""

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        self.exit_code = exit_code


class RemoteEnvError(RemoteError):
    """The remote lacks something kdtree needs (Python >= 3.11, nvcc, flock, ...)."""


class LockBusyError(RemoteError):
    """Another deploy held the host's lock for longer than the lock timeout."""
