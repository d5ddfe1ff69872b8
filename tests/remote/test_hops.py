"""Connections through other hops, as ssh_config describes them: a ProxyJump host (a
second real sshd on loopback) gets the same host-key checking as the target; ProxyCommand
lines run the command as OpenSSH would, whatever the HostName; `none` switches either off.
Every failure is a kdtree error with a sentence, never a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from remote import channel
from remote.connection import connect
from remote.errors import HostKeyError, UnreachableError

from kdtree_sshd import fingerprint_by_ssh_keygen

RELAY = Path(__file__).with_name("tcp_relay.py")


def logins(server) -> int:
    return server.log.read_text().count("Accepted publickey")


def jump_config(path: Path, sshd, jump, known: Path, proxy_jump: str = "kd-jump") -> Path:
    path.write_text(
        f"Host kd-jump\n  HostName 127.0.0.1\n  Port {jump.port}\n  User {jump.user}\n"
        f"  IdentityFile {jump.user_key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {known}\n"
        f"Host kd-target\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.user_key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {known}\n"
        f"  ProxyJump {proxy_jump}\n"
    )
    return path


def run_echo(host) -> str:
    conn = connect(host)
    try:
        return channel.run(conn, "echo through").text
    finally:
        conn.close()


def test_jump_host_key_is_checked_like_the_target(sshd, jump_sshd, host_factory, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts_entry())  # the target only: the jump host is unknown
    host = host_factory(ssh="kd-target", ssh_config=str(jump_config(tmp_path / "cfg", sshd, jump_sshd, known)))
    before = logins(jump_sshd), logins(sshd)
    with pytest.raises(HostKeyError) as err:
        connect(host)
    text = str(err.value)
    assert "jump host kd-jump" in text and "is not in" in text and "--accept-new-host-key" in text
    assert fingerprint_by_ssh_keygen(jump_sshd.host_key.with_suffix(".pub")) in text
    assert (logins(jump_sshd), logins(sshd)) == before  # refused before authenticating anywhere
    assert known.read_text() == sshd.known_hosts_entry()

    known.write_text(sshd.known_hosts_entry() + jump_sshd.known_hosts_entry())
    assert run_echo(host) == "through\n"
    assert (logins(jump_sshd), logins(sshd)) == (before[0] + 1, before[1] + 1)  # really via the hop


def test_changed_jump_host_key_is_refused(sshd, jump_sshd, host_factory, tmp_path):
    known = tmp_path / "known_hosts"
    # the jump host's port listed under the target's key: a changed key for that hop
    known.write_text(sshd.known_hosts_entry() + sshd.known_hosts_entry(port=jump_sshd.port))
    host = host_factory(ssh="kd-target", ssh_config=str(jump_config(tmp_path / "cfg", sshd, jump_sshd, known)))
    with pytest.raises(HostKeyError, match="jump host kd-jump.*HOST KEY CHANGED"):
        connect(host, accept_new_host_key=True)


def test_accept_new_adds_every_hop(sshd, jump_sshd, host_factory, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text("")
    host = host_factory(ssh="kd-target", ssh_config=str(jump_config(tmp_path / "cfg", sshd, jump_sshd, known)))
    conn = connect(host, accept_new_host_key=True)
    conn.close()
    assert sorted(known.read_text().splitlines(True)) == sorted(
        [sshd.known_hosts_entry(), jump_sshd.known_hosts_entry()])
    assert run_echo(host) == "through\n"  # now both are known: no flag needed


def test_the_hosts_known_hosts_setting_covers_the_jump_host(sshd, jump_sshd, host_factory, tmp_path):
    """`known_hosts` in the inventory is the one file for every hop (ssh_config's
    UserKnownHostsFile lines name an empty file here)."""
    empty = tmp_path / "empty"
    empty.write_text("")
    known = tmp_path / "inventory_known_hosts"
    known.write_text(sshd.known_hosts_entry() + jump_sshd.known_hosts_entry())
    host = host_factory(ssh="kd-target", known_hosts=str(known),
                        ssh_config=str(jump_config(tmp_path / "cfg", sshd, jump_sshd, empty)))
    assert run_echo(host) == "through\n"


def test_proxyjump_none_means_direct(sshd, jump_sshd, host_factory, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts_entry())
    cfg = jump_config(tmp_path / "cfg", sshd, jump_sshd, known, proxy_jump="none")
    before = logins(jump_sshd)
    assert run_echo(host_factory(ssh="kd-target", ssh_config=str(cfg))) == "through\n"
    assert logins(jump_sshd) == before


def proxy_command_config(path: Path, sshd, hostname: str, command: str) -> Path:
    path.write_text(
        f"Host kd-pc\n  HostName {hostname}\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.user_key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {sshd.known_hosts}\n"
        f"  ProxyCommand {command}\n"
    )
    return path


@pytest.mark.parametrize("hostname", ["127.0.0.1", "[::1]", "gpu[1].cluster"])
def test_proxy_command_whatever_the_host_name(sshd, host_factory, tmp_path, hostname):
    """fabric re-parses the command under `Host <HostName>`; a HostName holding glob
    characters then matched nothing (KeyError: 'proxycommand')."""
    known = tmp_path / "known_hosts"
    name = hostname if sshd.port == 22 else f"[{hostname}]:{sshd.port}"
    known.write_text(f"{name} {sshd.host_key_line}\n")
    cfg = proxy_command_config(tmp_path / "cfg", sshd, hostname,
                               f"{sys.executable} {RELAY} 127.0.0.1 %p")
    assert run_echo(host_factory(ssh="kd-pc", ssh_config=str(cfg), known_hosts=str(known))) == "through\n"


def test_proxy_command_that_cannot_start(sshd, host_factory, tmp_path, capfd):
    cfg = proxy_command_config(tmp_path / "cfg", sshd, "127.0.0.1", "no-such-proxy-program %h %p")
    with pytest.raises(UnreachableError) as err:
        connect(host_factory(ssh="kd-pc", ssh_config=str(cfg)))
    text = str(err.value)
    assert "ProxyCommand" in text and "no-such-proxy-program" in text and str(cfg) in text
    assert "Traceback" not in capfd.readouterr().err


def test_proxy_command_that_exits_at_once(sshd, host_factory, tmp_path, capfd):
    cfg = proxy_command_config(tmp_path / "cfg", sshd, "127.0.0.1", "false %h %p")
    with pytest.raises(UnreachableError) as err:
        connect(host_factory(ssh="kd-pc", ssh_config=str(cfg), connect_timeout=3))
    text = str(err.value)
    assert "ProxyCommand" in text and "false 127.0.0.1" in text
    assert "Traceback" not in capfd.readouterr().err  # paramiko's own logging stays quiet
