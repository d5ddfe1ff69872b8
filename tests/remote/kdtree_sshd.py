"""A real OpenSSH server for the deploy tests: /usr/sbin/sshd in the foreground on a free
loopback port, with a throwaway host key, a throwaway user key in authorized_keys, a
known_hosts holding the host key, and an ssh_config with the alias `kdtree-test`.

It runs as the current user (root in CI) with StrictModes off (the key files live in a
pytest tmp dir) and `SetEnv HOME=<tmp>/home`, so `~/...` remote paths land in the tmp dir.
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
ALIAS = "kdtree-test"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def keygen(path: Path, kind: str = "ed25519") -> str:
    """Make a key pair at path; returns the public key line's 'type base64' part."""
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "kdtree-test", "-f", str(path)],
                   check=True, capture_output=True)
    return " ".join(path.with_suffix(path.suffix + ".pub").read_text().split()[:2])


def fingerprint_by_ssh_keygen(pub: Path) -> str:
    """`ED25519 SHA256:...` as ssh-keygen prints it (the oracle for our fingerprints)."""
    out = subprocess.run(["ssh-keygen", "-l", "-f", str(pub)], check=True, capture_output=True,
                         text=True).stdout.split()
    return f"{out[-1].strip('()')} {out[1]}"


@dataclass
class SshServer:
    dir: Path
    port: int
    user: str
    user_key: Path
    host_key: Path
    host_key_line: str  # "ssh-ed25519 AAAA..."
    known_hosts: Path
    ssh_config: Path
    home: Path
    process: subprocess.Popen
    log: Path

    def known_hosts_entry(self, port: int | None = None) -> str:
        return f"[127.0.0.1]:{port or self.port} {self.host_key_line}\n"

    def write_ssh_config(self, path: Path, *, port: int | None = None, alias: str = ALIAS,
                         known_hosts: Path | None = None) -> Path:
        path.write_text(
            f"Host {alias}\n"
            f"  HostName 127.0.0.1\n"
            f"  Port {port or self.port}\n"
            f"  User {self.user}\n"
            f"  IdentityFile {self.user_key}\n"
            f"  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {known_hosts or self.known_hosts}\n"
        )
        return path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_sshd(base: Path) -> SshServer:
    base.mkdir(parents=True, exist_ok=True)
    home = base / "home"
    home.mkdir()
    host_key_line = keygen(base / "host_key")
    keygen(base / "user_key")
    (base / "authorized_keys").write_text((base / "user_key.pub").read_text())
    port = free_port()
    config = base / "sshd_config"
    config.write_text(
        f"Port {port}\n"
        f"ListenAddress 127.0.0.1\n"
        f"HostKey {base / 'host_key'}\n"
        f"PidFile {base / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {base / 'authorized_keys'}\n"
        f"StrictModes no\n"
        f"PubkeyAuthentication yes\n"
        f"PasswordAuthentication no\n"
        f"KbdInteractiveAuthentication no\n"
        f"UsePAM no\n"
        f"PermitRootLogin prohibit-password\n"
        f"SetEnv HOME={home}\n"
        f"MaxStartups 64:30:128\n"
        f"MaxSessions 64\n"
        f"LogLevel INFO\n"
    )
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # privilege separation dir
    log = base / "sshd.log"
    process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=open(log, "wb"),
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"sshd exited with {process.returncode}: {log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                if s.recv(64).startswith(b"SSH-2.0"):
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"sshd did not answer on port {port}: {log.read_text()}")
        time.sleep(0.05)
    known_hosts = base / "known_hosts"
    server = SshServer(base, port, getpass.getuser(), base / "user_key", base / "host_key",
                       host_key_line, known_hosts, base / "ssh_config", home, process, log)
    known_hosts.write_text(server.known_hosts_entry())
    server.write_ssh_config(server.ssh_config)
    return server
