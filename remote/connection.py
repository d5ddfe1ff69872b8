"""The one way this package connects: `connect(host)` returns an opened fabric Connection
with strict host-key checking, key authentication and timeouts, or raises an error that
says what to do.

- ssh_config: the host's `ssh_config` file if set (only that file, as `ssh -F` does), else
  ~/.ssh/config and /etc/ssh/ssh_config; aliases, HostName, User, Port, IdentityFile,
  ProxyJump all work through fabric.
- Host keys: see hostkeys.py. Nothing is ever added without --accept-new-host-key.
- Authentication: keys only (agent, IdentityFile / `key`, ~/.ssh/id_*); we never pass or
  print a password, and messages name key files, never their contents.
- Timeouts: `connect_timeout` bounds the TCP connect, the SSH banner and authentication
  separately; a keepalive notices a dead link during long builds.
"""

from __future__ import annotations

import socket
import time
import paramiko
from fabric import Config, Connection

from remote.errors import HostKeyError, UnreachableError
from remote.hostkeys import (
    AcceptNewHostKey,
    RefuseUnknownHostKey,
    UnknownHostKey,
    fingerprint,
    resolve_known_hosts,
)
from remote.inventory import HostConfig

KEEPALIVE_S = 15


class HostConnection(Connection):
    """A fabric Connection that remembers which known_hosts file it checks against.
    (Declared here because fabric turns unknown attribute sets into config entries.)"""

    known_hosts_file: str = ""


def make_connection(host: HostConfig, *, accept_new_host_key: bool = False) -> HostConnection:
    """A configured, not yet opened Connection (use connect() unless you need that)."""
    try:
        config = Config(runtime_ssh_path=host.ssh_config) if host.ssh_config else Config()
    except FileNotFoundError:
        raise UnreachableError(
            f"{host.name}: ssh_config file {host.ssh_config} does not exist ({host.source})"
        ) from None
    connect_kwargs: dict = {
        "banner_timeout": host.connect_timeout,
        "auth_timeout": host.connect_timeout,
        "channel_timeout": host.connect_timeout,
    }
    if host.key:
        connect_kwargs["key_filename"] = [host.key]
    conn = HostConnection(
        host.target,
        user=host.user,
        port=host.port,
        config=config,
        connect_timeout=host.connect_timeout,
        connect_kwargs=connect_kwargs,
    )
    if str(conn.ssh_config.get("identitiesonly", "no")).lower() == "yes":
        conn.connect_kwargs.update(look_for_keys=False, allow_agent=False)

    known_hosts = resolve_known_hosts(host.known_hosts, conn.ssh_config)
    client = conn.client
    try:
        client.load_system_host_keys(known_hosts)  # read only: paramiko never rewrites it
    except FileNotFoundError:
        pass  # then every host is unknown, and refused unless accept_new_host_key
    except OSError as exc:
        raise HostKeyError(f"{host.name}: cannot read known_hosts {known_hosts}: {exc}") from None
    if accept_new_host_key:
        hash_names = str(conn.ssh_config.get("hashknownhosts", "no")).lower() == "yes"
        client.set_missing_host_key_policy(AcceptNewHostKey(known_hosts, hash_names))
    else:
        client.set_missing_host_key_policy(RefuseUnknownHostKey(known_hosts))
    conn.known_hosts_file = known_hosts
    return conn


def connect(host: HostConfig, *, accept_new_host_key: bool = False) -> HostConnection:
    """Open a connection to host, or raise HostKeyError / UnreachableError."""
    conn = make_connection(host, accept_new_host_key=accept_new_host_key)
    open_connection(conn, host)
    return conn


def _auth_failed(where: str, conn: HostConnection) -> UnreachableError:
    return UnreachableError(
        f"{where}: authentication failed. kdtree uses key authentication only (ssh-agent, the "
        f"host's `key` / IdentityFile, or ~/.ssh/id_*): check that your public key is in "
        f"~/.ssh/authorized_keys of {conn.user} there"
    )


def open_connection(conn: HostConnection, host: HostConfig) -> None:
    where = f"{host.name} ({conn.user}@{conn.host}:{conn.port})"
    known_hosts = conn.known_hosts_file
    started = time.monotonic()
    try:
        conn.open()
    except UnknownHostKey as exc:
        conn.close()
        if exc.reason == "unknown":
            raise HostKeyError(
                f"{where}: host key {fingerprint(exc.key)} is not in {known_hosts}; refusing to "
                f"connect. Check the fingerprint with the machine's owner (on it: "
                f"`ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub`), then rerun with "
                f"--accept-new-host-key to add it"
            ) from None
        raise HostKeyError(
            f"{where}: HOST KEY CHANGED: {known_hosts} knows {exc.hostname} under another key "
            f"type, the server offered {fingerprint(exc.key)}; refusing to connect. If the "
            f"machine was reinstalled, remove the old entry (`ssh-keygen -R '{exc.hostname}' "
            f"-f {known_hosts}`) and rerun with --accept-new-host-key"
        ) from None
    except paramiko.BadHostKeyException as exc:
        conn.close()
        name = exc.hostname if conn.port == 22 else f"[{exc.hostname}]:{conn.port}"
        raise HostKeyError(
            f"{where}: HOST KEY CHANGED: the server offered {fingerprint(exc.key)} but "
            f"{known_hosts} has {fingerprint(exc.expected_key)}; refusing to connect (this can "
            f"be an attack). If the machine was reinstalled, remove the old entry "
            f"(`ssh-keygen -R '{name}' -f {known_hosts}`) and rerun with --accept-new-host-key"
        ) from None
    except paramiko.AuthenticationException:
        conn.close()
        raise _auth_failed(where, conn) from None
    except socket.gaierror as exc:
        conn.close()
        raise UnreachableError(
            f"{where}: cannot resolve host name {conn.host!r} ({exc.strerror}); if it is an "
            f"ssh alias, check your ssh_config ({host.ssh_config or '~/.ssh/config'})"
        ) from None
    except (TimeoutError, socket.timeout):
        conn.close()
        raise UnreachableError(
            f"{where}: unreachable: no answer within {host.connect_timeout}s "
            f"(connect_timeout); is the machine up and the port right?"
        ) from None
    except paramiko.ssh_exception.NoValidConnectionsError as exc:
        conn.close()
        reasons = "; ".join(sorted({e.strerror or str(e) for e in exc.errors.values()}))
        raise UnreachableError(f"{where}: unreachable: {reasons}") from None
    except OSError as exc:
        conn.close()
        raise UnreachableError(f"{where}: unreachable: {exc.strerror or exc}") from None
    except paramiko.SSHException as exc:
        conn.close()
        text = str(exc)
        # paramiko reports a silent server as a banner error, or (when its handshake wait and
        # the banner wait expire together) as a lost session: both mean "no SSH answer"
        timed_out = time.monotonic() - started >= 0.9 * host.connect_timeout
        if "authentication" in text.lower():  # e.g. "No authentication methods available"
            raise _auth_failed(where, conn) from None
        if "banner" in text.lower() or (timed_out and "session" in text.lower()):
            text = (
                f"the port answered but sent no SSH banner within {host.connect_timeout}s "
                f"(not an SSH server, or a hung one)"
            )
        raise UnreachableError(f"{where}: SSH handshake failed: {text}") from None
    except EOFError:
        conn.close()
        raise UnreachableError(f"{where}: the server closed the connection during the handshake") from None
    conn.transport.set_keepalive(KEEPALIVE_S)
