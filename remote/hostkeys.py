"""Host-key checking. fabric's Connection auto-adds any key it has not seen (and loads no
known_hosts at all); we load one known_hosts file and install one of two policies:

- RefuseUnknownHostKey (the default): a host not in known_hosts is refused, with its
  fingerprint and the way to opt in.
- AcceptNewHostKey (`--accept-new-host-key`, like OpenSSH's StrictHostKeyChecking=accept-new):
  a host with no entry at all is added to the file; a host that has an entry under another
  key type is treated as changed and refused.

A changed key for a known key type never reaches a policy: paramiko raises
BadHostKeyException, which connection.py turns into a HOST KEY CHANGED message.
"""

from __future__ import annotations

import base64
import hashlib
import os
import threading
from pathlib import Path

import paramiko

_append_lock = threading.Lock()  # several hosts may accept keys into one file at once


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's format: `ED25519 SHA256:base64-without-padding`."""
    digest = base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")
    kind = key.get_name().replace("ssh-", "").split("-")[0].upper()
    return f"{kind} SHA256:{digest}"


class UnknownHostKey(paramiko.SSHException):
    def __init__(self, hostname: str, key: paramiko.PKey, known_hosts: str, reason: str):
        self.hostname = hostname
        self.key = key
        self.known_hosts = known_hosts
        self.reason = reason
        super().__init__(f"{reason}: {hostname} ({fingerprint(key)})")


def _known_entry(client: paramiko.SSHClient, hostname: str):
    """Any entry for hostname in the keys the client loaded (system or own)."""
    for keys in (client._system_host_keys, client.get_host_keys()):  # noqa: SLF001
        entry = keys.lookup(hostname)
        if entry:
            return entry
    return None


class RefuseUnknownHostKey(paramiko.MissingHostKeyPolicy):
    def __init__(self, known_hosts: str):
        self.known_hosts = known_hosts

    def missing_host_key(self, client, hostname, key):
        reason = "known under another key type" if _known_entry(client, hostname) else "unknown"
        raise UnknownHostKey(hostname, key, self.known_hosts, reason)


class AcceptNewHostKey(paramiko.MissingHostKeyPolicy):
    """Append an unknown host's key to known_hosts; never replace or add beside an entry."""

    def __init__(self, known_hosts: str, hash_names: bool = False):
        self.known_hosts = known_hosts
        self.hash_names = hash_names
        self.added: list[str] = []  # "host fingerprint" lines, for the report

    def missing_host_key(self, client, hostname, key):
        if _known_entry(client, hostname):
            # the host is known with a different key type: that is a changed key
            raise UnknownHostKey(hostname, key, self.known_hosts, "known under another key type")
        name = paramiko.HostKeys.hash_host(hostname) if self.hash_names else hostname
        line = f"{name} {key.get_name()} {key.get_base64()}\n"
        path = Path(self.known_hosts)
        with _append_lock:
            if not path.parent.exists():
                path.parent.mkdir(mode=0o700, parents=True)
            needs_newline = path.exists() and path.stat().st_size > 0 and not _ends_with_newline(path)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a") as fh:
                fh.write(("\n" if needs_newline else "") + line)
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.added.append(f"{hostname} {fingerprint(key)}")


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"


def resolve_known_hosts(configured: str | None, ssh_config: dict) -> str:
    """The one known_hosts file we check against: the host's `known_hosts`, else the
    first UserKnownHostsFile of its ssh_config entry, else ~/.ssh/known_hosts."""
    if configured:
        return configured
    from_config = ssh_config.get("userknownhostsfile")
    if from_config:
        first = from_config.split()[0] if isinstance(from_config, str) else from_config[0]
        return os.path.expanduser(first)
    return os.path.expanduser("~/.ssh/known_hosts")
