"""The one way this package connects: `connect(host)` returns an opened fabric Connection
with strict host-key checking, key authentication and timeouts, or raises an error that
says what to do (connect_errors.py writes those sentences).

- ssh_config: the host's `ssh_config` file if set (only that file, as `ssh -F` does), else
  ~/.ssh/config and /etc/ssh/ssh_config; aliases, HostName, User, Port, IdentityFile,
  ProxyJump and ProxyCommand all work through fabric (`none` switches either off).
- Host keys: see hostkeys.py. Every hop is checked: the target and each ProxyJump host,
  against the host's `known_hosts` when set (one file for all hops), else each hop's own
  UserKnownHostsFile. Nothing is ever added without --accept-new-host-key.
- Authentication: keys only (agent, IdentityFile / `key`, ~/.ssh/id_*); we never pass or
  print a password, and messages name key files, never their contents.
- Timeouts: `connect_timeout` bounds the TCP connect, the SSH banner and authentication
  separately, on every hop; a keepalive notices a dead link during long builds.
"""

from __future__ import annotations

import logging
import os

import paramiko
from fabric import Config, Connection

from remote.connect_errors import ProxyCommandError, config_error, explain
from remote.errors import InventoryError
from remote.hostkeys import AcceptNewHostKey, RefuseUnknownHostKey, load_known_hosts, resolve_known_hosts
from remote.inventory import HostConfig

KEEPALIVE_S = 15

# paramiko logs transport failures (with tracebacks) at ERROR; with no handler configured,
# Python's last-resort handler would print them over our one-line message
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class HostConnection(Connection):
    """A fabric Connection that remembers which known_hosts file it checks against and,
    for a ProxyJump hop, which hop it is. (Declared here because fabric turns unknown
    attribute sets into config entries.)"""

    known_hosts_file: str = ""
    hop: str | None = None  # "jump host NAME", or None for the target itself

    def open_gateway(self):
        """fabric re-parses a ProxyCommand under `Host <HostName>`, which matches nothing
        when the name holds glob characters (KeyError: 'proxycommand'). paramiko's
        ssh_config lookup has expanded %h/%p already: run the command as it stands."""
        if isinstance(self.gateway, str):
            try:
                return paramiko.ProxyCommand(self.gateway)
            except OSError as exc:  # the program is missing or not executable
                raise ProxyCommandError(self.gateway, exc.strerror or str(exc)) from None
        try:
            return super().open_gateway()
        except Exception as exc:  # say which hop failed (the innermost one names itself)
            if getattr(exc, "hop", None) is None and getattr(exc, "kdtree_hop", None) is None:
                exc.kdtree_hop = self.gateway.hop
            raise


def _hop_name(conn: Connection) -> str:
    return conn.original_host if hasattr(conn, "original_host") else conn.host


def _secure(conn: Connection, host: HostConfig, accept_new_host_key: bool, hop: str | None) -> None:
    """Timeouts, key-only auth and the strict host-key policy on conn, then on its
    ProxyJump hops (fabric builds those with auto-adding policies)."""
    timeouts = {k: host.connect_timeout for k in ("banner_timeout", "auth_timeout", "channel_timeout")}
    conn.connect_kwargs.update(timeouts)
    conn.connect_timeout = host.connect_timeout
    if str(conn.ssh_config.get("identitiesonly", "no")).lower() == "yes":
        conn.connect_kwargs.update(look_for_keys=False, allow_agent=False)
    if str(conn.ssh_config.get("proxyjump", "")).lower() == "none":
        conn.gateway = None  # OpenSSH: ProxyJump none = connect directly
    known_hosts = resolve_known_hosts(host.known_hosts, conn.ssh_config)
    try:
        known = load_known_hosts(known_hosts)
    except OSError as exc:
        raise InventoryError(f"{host.name}: cannot read known_hosts {known_hosts}: {exc.strerror or exc}") from None
    client = conn.client
    client._system_host_keys = known  # noqa: SLF001  (read only: paramiko never rewrites it)
    if accept_new_host_key:
        hash_names = str(conn.ssh_config.get("hashknownhosts", "no")).lower() == "yes"
        client.set_missing_host_key_policy(AcceptNewHostKey(known, known_hosts, hop, hash_names))
    else:
        client.set_missing_host_key_policy(RefuseUnknownHostKey(known, known_hosts, hop))
    conn.known_hosts_file = known_hosts
    conn.hop = hop
    if isinstance(conn.gateway, Connection):
        if not isinstance(conn.gateway, HostConnection):
            conn.gateway.__class__ = HostConnection  # same object, our open_gateway
        _secure(conn.gateway, host, accept_new_host_key, f"jump host {_hop_name(conn.gateway)}")


def make_connection(host: HostConfig, *, accept_new_host_key: bool = False) -> HostConnection:
    """A configured, not yet opened Connection (use connect() unless you need that)."""
    if host.key and not os.path.exists(host.key):
        raise InventoryError(f"{host.name}: key file {host.key} does not exist ({host.source or 'kdtree.toml'})")
    try:
        config = Config(runtime_ssh_path=host.ssh_config) if host.ssh_config else Config()
        connect_kwargs: dict = {"key_filename": [host.key]} if host.key else {}
        conn = HostConnection(host.target, user=host.user, port=host.port, config=config,
                              connect_timeout=host.connect_timeout, connect_kwargs=connect_kwargs)
    except (OSError, paramiko.SSHException, ValueError) as exc:  # unreadable or unusable ssh_config
        raise config_error(host, exc) from None
    _secure(conn, host, accept_new_host_key, None)
    return conn


def connect(host: HostConfig, *, accept_new_host_key: bool = False) -> HostConnection:
    """Open a connection to host, or raise a RemoteError that says what to do."""
    conn = make_connection(host, accept_new_host_key=accept_new_host_key)
    open_connection(conn, host)
    return conn


def open_connection(conn: HostConnection, host: HostConfig) -> None:
    import time

    started = time.monotonic()
    try:
        conn.open()
    except Exception as exc:  # every failure becomes a sentence (see connect_errors.explain)
        error = explain(exc, conn, host, time.monotonic() - started)  # before close: it looks
        conn.close()                                                  # at a ProxyCommand's exit
        raise error from None
    conn.transport.set_keepalive(KEEPALIVE_S)
