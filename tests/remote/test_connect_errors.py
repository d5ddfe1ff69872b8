"""Every way a connection can fail ends in a kdtree error whose sentence says what to do:
files named, no traceback, nothing secret printed. Against the real test sshd."""

from __future__ import annotations

import pytest

from remote.connection import connect
from remote.errors import InventoryError, RemoteError, UnreachableError

from kdtree_sshd import ALIAS, keygen


def test_encrypted_key_without_agent_says_to_load_it(sshd, host_factory, tmp_path, monkeypatch):
    import subprocess

    key = tmp_path / "locked_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "a passphrase", "-f", str(key)], check=True)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    config = tmp_path / "cfg"
    sshd.write_ssh_config(config)
    config.write_text(config.read_text().replace(str(sshd.user_key), str(key)))
    with pytest.raises(UnreachableError) as err:
        connect(host_factory(ssh_config=str(config)))
    text = str(err.value)
    assert str(key) in text and "passphrase" in text and "ssh-add" in text
    assert not err.value.transient


def test_missing_key_file_is_named(sshd, host_factory, tmp_path):
    with pytest.raises(InventoryError) as err:
        connect(host_factory(key=str(tmp_path / "no_such_key")))
    assert "no_such_key" in str(err.value) and "does not exist" in str(err.value)


@pytest.mark.parametrize("body, says", [
    ("Host {alias}\n  Port\n", "Port"),
    ("Host {alias}\n  HostName 127.0.0.1\n  Port twenty-two\n", "twenty-two"),
])
def test_unusable_ssh_config_names_the_file(sshd, host_factory, tmp_path, body, says):
    config = tmp_path / "bad_ssh_config"
    config.write_text(body.format(alias=ALIAS))
    with pytest.raises(InventoryError) as err:
        connect(host_factory(ssh_config=str(config)))
    assert str(config) in str(err.value) and says in str(err.value)


def test_authentication_failure_is_not_transient(sshd, host_factory, tmp_path):
    keygen(tmp_path / "stranger")
    config = tmp_path / "cfg"
    sshd.write_ssh_config(config)
    config.write_text(config.read_text().replace(str(sshd.user_key), str(tmp_path / "stranger")))
    with pytest.raises(UnreachableError) as err:
        connect(host_factory(ssh_config=str(config)))
    assert "authentication failed" in str(err.value) and not err.value.transient


def test_refused_port_is_transient(host_factory):
    from kdtree_sshd import free_port

    with pytest.raises(UnreachableError) as err:
        connect(host_factory(ssh=None, host="127.0.0.1", port=free_port(), ssh_config=None,
                             connect_timeout=2))
    assert err.value.transient and isinstance(err.value, RemoteError)
