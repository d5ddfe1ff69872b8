"""What a failed connection means, in a sentence a person can act on. connection.py hands
every exception from opening a connection (paramiko, fabric, the socket layer, a proxy)
to explain(), which returns the RemoteError to raise. Network failures are marked
transient (a later try may work); authentication, host keys and configuration are not.
"""

from __future__ import annotations

import socket

import paramiko

from remote.errors import HostKeyError, InventoryError, RemoteError, UnreachableError, UnresolvedHostError
from remote.hostkeys import UnknownHostKey, fingerprint
from remote.inventory import HostConfig

_DEFAULT_CONFIGS = "~/.ssh/config or /etc/ssh/ssh_config"


class ProxyCommandError(Exception):
    """A ProxyCommand that could not be started (raised by HostConnection.open_gateway)."""

    def __init__(self, command: str, reason: str):
        super().__init__(f"{command}: {reason}")
        self.command = command
        self.reason = reason


def config_error(host: HostConfig, exc: BaseException) -> InventoryError:
    """The ssh_config file could not be read or holds a value fabric cannot use."""
    path = host.ssh_config or _DEFAULT_CONFIGS
    if isinstance(exc, FileNotFoundError):
        reason = "does not exist"
    elif isinstance(exc, OSError):
        reason = f"cannot be read ({exc.strerror or exc})"
    else:
        reason = f"holds a line or value that cannot be used: {exc}"
    return InventoryError(f"{host.name}: ssh_config {path} {reason} ({host.source or 'kdtree.toml'})")


def _hops(conn):
    """conn and its ProxyJump hops, nearest first."""
    while conn is not None and not isinstance(conn, str):
        yield conn
        conn = getattr(conn, "gateway", None)


def _key_files(conn) -> str:
    files = conn.connect_kwargs.get("key_filename") or []
    files = [files] if isinstance(files, str) else list(files)
    return ", ".join(files) or "ssh-agent and ~/.ssh/id_*"


def _auth_failed(where: str, conn) -> UnreachableError:
    return UnreachableError(
        f"{where}: authentication failed (keys tried: {_key_files(conn)}). kdtree uses key "
        f"authentication only (ssh-agent, the host's `key` / IdentityFile, or ~/.ssh/id_*): "
        f"check that your public key is in ~/.ssh/authorized_keys of {conn.user} there"
    )


def _host_key_error(exc: UnknownHostKey, where: str) -> HostKeyError:
    fp = fingerprint(exc.key)
    if exc.reason == "revoked":
        return HostKeyError(
            f"{where}: the server offered host key {fp}, which {exc.known_hosts} marks @revoked: "
            f"REVOKED key, refusing to connect. Ask the machine's owner for its current key"
        )
    if exc.reason == "other type":
        return HostKeyError(
            f"{where}: HOST KEY CHANGED: {exc.known_hosts} knows {exc.hostname} under another key "
            f"type, the server offered {fp}; refusing to connect. If the machine was reinstalled, "
            f"remove the old entry (`ssh-keygen -R '{exc.hostname}' -f {exc.known_hosts}`) and "
            f"rerun with --accept-new-host-key"
        )
    hint = ""
    if exc.known.trusted_by_cert_authority(exc.hostname):
        hint = (f" ({exc.known_hosts} trusts a @cert-authority for it, but kdtree cannot check "
                f"host certificates: add the host's own key)")
    return HostKeyError(
        f"{where}: host key {fp} is not in {exc.known_hosts}{hint}; refusing to connect. Check "
        f"the fingerprint with the machine's owner (on it: `ssh-keygen -lf "
        f"/etc/ssh/ssh_host_*_key.pub`), then rerun with --accept-new-host-key to add it"
    )


def _through_proxy_command(conn, config: str) -> str:
    """' through the ProxyCommand `...` (it exited with status N)' when conn uses one."""
    if not isinstance(getattr(conn, "gateway", None), str):
        return ""
    text = f" through the ProxyCommand `{conn.gateway}` from {config}"
    transport = conn.client.get_transport()
    process = getattr(getattr(transport, "sock", None), "process", None)
    status = process.poll() if process is not None else None
    if status is not None:
        text += f" (it exited with status {status}: run it by hand to see why)"
    return text


def explain(exc: BaseException, conn, host: HostConfig, elapsed_s: float) -> RemoteError:
    hop = getattr(exc, "hop", None) or getattr(exc, "kdtree_hop", None)
    where = f"{host.name} ({conn.user}@{conn.host}:{conn.port})" + (f", {hop}" if hop else "")
    config = host.ssh_config or _DEFAULT_CONFIGS
    timeout = host.connect_timeout

    if isinstance(exc, RemoteError):
        return exc
    if isinstance(exc, UnknownHostKey):
        return _host_key_error(exc, where)
    if isinstance(exc, paramiko.BadHostKeyException):
        failed = next((c for c in _hops(conn) if c.hop == hop), conn)  # the hop that said it
        name = exc.hostname if int(failed.port) == 22 else f"[{exc.hostname}]:{failed.port}"
        known = failed.known_hosts_file
        if failed.client._system_host_keys.is_revoked(exc.key):  # noqa: SLF001
            return HostKeyError(f"{where}: the server offered host key {fingerprint(exc.key)}, "
                                f"which {known} marks @revoked: REVOKED key, refusing to connect")
        return HostKeyError(
            f"{where}: HOST KEY CHANGED: the server offered {fingerprint(exc.key)} but {known} "
            f"has {fingerprint(exc.expected_key)}; refusing to connect (this can be an attack). "
            f"If the machine was reinstalled, remove the old entry (`ssh-keygen -R '{name}' -f "
            f"{known}`) and rerun with --accept-new-host-key"
        )
    if isinstance(exc, paramiko.PasswordRequiredException):
        return UnreachableError(
            f"{where}: the private key ({_key_files(conn)}) is protected by a passphrase and no "
            f"ssh-agent holds it; kdtree never asks for passphrases: load it with `ssh-add FILE`, "
            f"or name an unencrypted deploy key as the host's `key`"
        )
    if isinstance(exc, paramiko.BadAuthenticationType):
        return UnreachableError(
            f"{where}: the server accepts only {', '.join(exc.allowed_types) or 'no method'} "
            f"logins; kdtree uses keys only: enable PubkeyAuthentication there and add your key "
            f"to ~/.ssh/authorized_keys of {conn.user}"
        )
    if isinstance(exc, paramiko.AuthenticationException):
        return _auth_failed(where, conn)
    if isinstance(exc, ProxyCommandError):
        return UnreachableError(
            f"{where}: the ProxyCommand `{exc.command}` from {config} could not start "
            f"({exc.reason}); check that it runs in a shell here"
        )
    if isinstance(exc, paramiko.ProxyCommandFailure):
        return UnreachableError(
            f"{where}: the ProxyCommand `{exc.command}` from {config} stopped before the SSH "
            f"handshake ({exc.error}); run it by hand to see why", transient=True,
        )
    if isinstance(exc, paramiko.ChannelException):
        return UnreachableError(
            f"{where}: the jump host refused to open a connection to {conn.host}:{conn.port} "
            f"({exc.text}); check the target's address as the jump host sees it, and that the "
            f"jump host allows TCP forwarding (AllowTcpForwarding)", transient=False,
        )
    if isinstance(exc, socket.gaierror):
        return UnresolvedHostError(
            f"{where}: cannot resolve host name {conn.host!r} ({exc.strerror}); if it is an "
            f"ssh alias, check your ssh_config ({config})", transient=True,
        )
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return UnreachableError(f"{where}: unreachable: no answer within {timeout}s "
                                f"(connect_timeout); is the machine up and the port right?",
                                transient=True)
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        reasons = "; ".join(sorted({e.strerror or str(e) for e in exc.errors.values()}))
        return UnreachableError(f"{where}: unreachable: {reasons}", transient=True)
    proxy = _through_proxy_command(conn, config)
    if isinstance(exc, (OSError, EOFError)):
        text = getattr(exc, "strerror", None) or str(exc) or "the server closed the connection"
        return UnreachableError(f"{where}: unreachable{proxy}: {text} (during the SSH handshake)",
                                transient=True)
    if isinstance(exc, paramiko.IncompatiblePeer):
        return UnreachableError(f"{where}: no SSH algorithm in common with the server ({exc}); "
                                f"its sshd is too old or too restricted for paramiko")
    if isinstance(exc, paramiko.SSHException):
        text = str(exc)
        if "authentication" in text.lower():  # e.g. "No authentication methods available"
            return _auth_failed(where, conn)
        # paramiko reports a silent server as a banner error, or (when its handshake wait and
        # the banner wait expire together) as a lost session: both mean "no SSH answer"
        timed_out = elapsed_s >= 0.9 * timeout
        if "banner" in text.lower() or (timed_out and "session" in text.lower()):
            text = (f"the port answered but sent no SSH banner within {timeout}s "
                    f"(not an SSH server, or a hung one)")
        return UnreachableError(f"{where}: SSH handshake failed{proxy}: {text}", transient=True)
    return UnreachableError(
        f"{where}: could not connect: {type(exc).__name__}: {exc} (an error of the SSH "
        f"libraries that kdtree does not know; `ssh -v -F {config} {host.target}` may say more)"
    )
