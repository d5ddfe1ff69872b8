"""Host-key checking. fabric's Connection auto-adds any key it has not seen (and loads no
known_hosts at all); for the target and for every ProxyJump hop we load one known_hosts
file and install one of two policies:

- RefuseUnknownHostKey (the default): a host not in known_hosts is refused, with its
  fingerprint and the way to opt in.
- AcceptNewHostKey (`--accept-new-host-key`, like OpenSSH's StrictHostKeyChecking=accept-new):
  a host with no entry at all is added to the file; a host that has an entry under another
  key type is treated as changed and refused.

known_hosts is read here, not by paramiko (whose reader fails on marker lines:
https://github.com/paramiko/paramiko/issues/1219), the way OpenSSH reads it:
- `@revoked PATTERNS KEY`: that key is refused for every host, even where a plain line
  lists it, and is never added by --accept-new-host-key;
- `@cert-authority PATTERNS KEY`: skipped (paramiko cannot check host certificates); a
  host known only through one is unknown, and the message says so;
- lines that cannot be parsed are skipped, as OpenSSH skips them.

A changed key for a known key type never reaches a policy: paramiko raises
BadHostKeyException, which connect_errors.py turns into a HOST KEY CHANGED message.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import threading
from pathlib import Path

import paramiko
from paramiko.hostkeys import HostKeyEntry

_append_lock = threading.Lock()  # several hosts may accept keys into one file at once


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's format: `ED25519 SHA256:base64-without-padding`."""
    digest = base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")
    kind = key.get_name().replace("ssh-", "").split("-")[0].upper()
    return f"{kind} SHA256:{digest}"


def _glob(pattern: str, hostname: str) -> bool:
    """OpenSSH's wildcards: `*` and `?` only (brackets are literal: `[host]:port`)."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, hostname, flags=re.IGNORECASE) is not None


def _pattern_matches(patterns: str, hostname: str) -> bool:
    """OpenSSH host patterns: comma-separated globs, `!` negates (a negated match wins)."""
    matched = False
    for pattern in patterns.split(","):
        negated = pattern.startswith("!")
        if _glob(pattern[1:] if negated else pattern, hostname):
            if negated:
                return False
            matched = True
    return matched


class KnownHosts(paramiko.HostKeys):
    """One known_hosts file, read with its markers (see the module doc)."""

    def __init__(self, filename: str | None = None):
        self.revoked: set[bytes] = set()  # key blobs
        self.cert_authority_patterns: list[str] = []
        super().__init__(filename)

    def load(self, filename: str) -> None:
        plain: list[HostKeyEntry] = []
        with open(filename, encoding="utf-8", errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                if line.startswith("@"):
                    marker, _, rest = line.partition(" ")
                    if marker == "@revoked":
                        blob = _key_blob(rest.strip())
                        if blob is not None:
                            self.revoked.add(blob)
                    elif marker == "@cert-authority":
                        self.cert_authority_patterns.append(rest.split()[0] if rest.split() else "")
                    continue  # other markers: OpenSSH ignores the line too
                try:
                    entry = HostKeyEntry.from_line(line, lineno)
                except Exception:  # InvalidHostKey, UnknownKeyType, ...: skipped like OpenSSH
                    entry = None
                if entry is not None:
                    plain.append(entry)
        # a revoked key stays refused even where a plain line lists it
        self._entries.extend(e for e in plain if e.key.asbytes() not in self.revoked)

    def is_revoked(self, key: paramiko.PKey) -> bool:
        return key.asbytes() in self.revoked

    def trusted_by_cert_authority(self, hostname: str) -> bool:
        return any(_pattern_matches(p, hostname) for p in self.cert_authority_patterns)


def _key_blob(rest: str) -> bytes | None:
    """The key of `PATTERNS KEYTYPE BASE64 [comment]`, or None when it does not parse."""
    fields = rest.split()
    if len(fields) < 3:
        return None
    try:
        return base64.b64decode(fields[2], validate=True)
    except (binascii.Error, ValueError):
        return None


def load_known_hosts(path: str) -> KnownHosts:
    """The file read as above; a missing file is empty (then every host is unknown)."""
    known = KnownHosts()
    try:
        known.load(path)
    except FileNotFoundError:
        pass
    return known


class UnknownHostKey(paramiko.SSHException):
    """Raised by our policies; `reason` is "unknown", "other type" or "revoked"."""

    def __init__(self, hostname: str, key: paramiko.PKey, known: KnownHosts, known_hosts: str,
                 reason: str, hop: str | None):
        self.hostname = hostname
        self.key = key
        self.known = known
        self.known_hosts = known_hosts
        self.reason = reason
        self.hop = hop  # "jump host NAME" for a ProxyJump hop, None for the target
        super().__init__(f"{reason}: {hostname} ({fingerprint(key)})")


def _known_entry(client: paramiko.SSHClient, hostname: str):
    """Any entry for hostname in the keys the client loaded (system or own)."""
    for keys in (client._system_host_keys, client.get_host_keys()):  # noqa: SLF001
        entry = keys.lookup(hostname)
        if entry:
            return entry
    return None


class _Policy(paramiko.MissingHostKeyPolicy):
    def __init__(self, known: KnownHosts, known_hosts: str, hop: str | None):
        self.known = known
        self.known_hosts = known_hosts
        self.hop = hop

    def refuse(self, hostname, key, reason: str) -> UnknownHostKey:
        return UnknownHostKey(hostname, key, self.known, self.known_hosts, reason, self.hop)

    def check_known(self, client, hostname, key) -> None:
        """Refuse a revoked key, or a host known under another key type."""
        if self.known.is_revoked(key):
            raise self.refuse(hostname, key, "revoked")
        if _known_entry(client, hostname):
            raise self.refuse(hostname, key, "other type")


class RefuseUnknownHostKey(_Policy):
    def missing_host_key(self, client, hostname, key):
        self.check_known(client, hostname, key)
        raise self.refuse(hostname, key, "unknown")


class AcceptNewHostKey(_Policy):
    """Append an unknown host's key to known_hosts; never replace or add beside an entry."""

    def __init__(self, known: KnownHosts, known_hosts: str, hop: str | None, hash_names: bool = False):
        super().__init__(known, known_hosts, hop)
        self.hash_names = hash_names
        self.added: list[str] = []  # "host fingerprint" lines, for the report

    def missing_host_key(self, client, hostname, key):
        self.check_known(client, hostname, key)
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
