"""Connecting: host keys checked against known_hosts (unknown and changed keys refused,
--accept-new-host-key adds only unknown ones), ssh_config aliases, and unreachable hosts
failing within the timeout with a message that says what happened."""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
import time

from pathlib import Path

import pytest

from remote import channel
from remote.connection import connect
from remote.errors import HostKeyError, UnreachableError
from remote.inventory import HostConfig

from conftest import remote_dir, run_deploy
from kdtree_sshd import fingerprint_by_ssh_keygen, free_port, keygen


def test_unknown_host_key_is_refused_and_accept_new_adds_it(sshd, host_factory, project, tmp_path):
    known = tmp_path / "empty_known_hosts"
    known.write_text("")
    host = host_factory(known_hosts=str(known))
    expected_fp = fingerprint_by_ssh_keygen(sshd.host_key.with_suffix(".pub"))

    refused = run_deploy(host, project, tmp_path / "results")
    assert not refused.ok
    assert "is not in" in refused.error and "--accept-new-host-key" in refused.error
    assert expected_fp in refused.error  # the fingerprint ssh-keygen computes
    assert known.read_text() == "" and not remote_dir(sshd, host).exists()

    accepted = run_deploy(host, project, tmp_path / "results", accept_new_host_key=True)
    assert accepted.ok, accepted.error
    assert known.read_text() == sshd.known_hosts_entry()  # exactly one OpenSSH-format line
    conn = connect(host)  # now known: no flag needed
    assert channel.run(conn, "echo ok").text == "ok\n"
    conn.close()


def test_changed_host_key_is_refused_even_with_accept_new(sshd, host_factory, tmp_path):
    other = keygen(tmp_path / "impostor")  # same type (ed25519), different key
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {other}\n")
    host = host_factory(known_hosts=str(known))
    for accept in (False, True):
        with pytest.raises(HostKeyError) as err:
            connect(host, accept_new_host_key=accept)
        text = str(err.value)
        assert "HOST KEY CHANGED" in text and "ssh-keygen -R" in text
        assert fingerprint_by_ssh_keygen(sshd.host_key.with_suffix(".pub")) in text
        assert fingerprint_by_ssh_keygen(tmp_path / "impostor.pub") in text
    assert known.read_text() == f"[127.0.0.1]:{sshd.port} {other}\n"  # never rewritten


def test_known_under_another_key_type_counts_as_changed(sshd, host_factory, tmp_path):
    rsa = keygen(tmp_path / "rsa_key", "rsa")
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {rsa}\n")
    host = host_factory(known_hosts=str(known))
    with pytest.raises(HostKeyError, match="HOST KEY CHANGED"):
        connect(host, accept_new_host_key=True)
    assert known.read_text() == f"[127.0.0.1]:{sshd.port} {rsa}\n"


def test_host_user_port_key_without_ssh_config(sshd, tmp_path):
    host = HostConfig(name="plain", host="127.0.0.1", port=sshd.port, user=sshd.user,
                      key=str(sshd.user_key), known_hosts=str(sshd.known_hosts), connect_timeout=5)
    conn = connect(host)
    try:
        assert channel.run(conn, 'printf "%s" "$HOME"').text == str(sshd.home)
    finally:
        conn.close()


def test_wrong_key_fails_authentication_without_printing_secrets(sshd, tmp_path):
    keygen(tmp_path / "stranger")
    host = HostConfig(name="plain", host="127.0.0.1", port=sshd.port, user=sshd.user,
                      key=str(tmp_path / "stranger"), known_hosts=str(sshd.known_hosts), connect_timeout=5)
    config = tmp_path / "ssh_config_none"
    config.write_text("Host *\n  IdentitiesOnly yes\n")
    host = dataclasses.replace(host, ssh_config=str(config))
    with pytest.raises(UnreachableError) as err:
        connect(host)
    text = str(err.value)
    assert "authentication failed" in text and "authorized_keys" in text
    private = (tmp_path / "stranger").read_text()
    assert private.splitlines()[1] not in text  # the message names files, never key material


def test_refused_port_fails_fast_and_clearly(tmp_path):
    port = free_port()  # nothing listens there
    host = HostConfig(name="gone", host="127.0.0.1", port=port, connect_timeout=2,
                      known_hosts=str(tmp_path / "kh"))
    started = time.monotonic()
    with pytest.raises(UnreachableError) as err:
        connect(host)
    assert time.monotonic() - started < 2
    assert "gone (" in str(err.value) and "unreachable" in str(err.value)
    assert "refused" in str(err.value).lower()


def test_silent_server_fails_within_the_timeout(tmp_path):
    """A port that accepts TCP but never speaks SSH (a hung box, a wrong service)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    held = []
    threading.Thread(target=lambda: held.append(listener.accept()), daemon=True).start()
    host = HostConfig(name="mute", host="127.0.0.1", port=listener.getsockname()[1],
                      connect_timeout=2, known_hosts=str(tmp_path / "kh"))
    started = time.monotonic()
    try:
        with pytest.raises(UnreachableError) as err:
            connect(host)
    finally:
        listener.close()
    elapsed = time.monotonic() - started
    assert 1.5 < elapsed < 5, elapsed
    assert "no SSH banner within 2s" in str(err.value)


def test_deploy_to_unreachable_host_reports_it_per_host(project, tmp_path):
    from remote.deploy import DeployOptions, deploy_host
    from remote.output import CollectingReporter

    host = HostConfig(name="gone", host="127.0.0.1", port=free_port(), connect_timeout=2,
                      known_hosts=str(tmp_path / "kh"))
    (tmp_path / "r" / "gone").mkdir(parents=True)  # results of an earlier deploy
    (tmp_path / "r" / "gone" / "deploy.json").write_text('{"ok": true}\n')
    result = deploy_host(host, DeployOptions(project_root=project, results_root=tmp_path / "r",
                                             work_root=tmp_path / "work"), CollectingReporter())
    assert not result.ok and "unreachable" in result.error
    assert (tmp_path / "r" / "gone" / "deploy.json").read_text() == '{"ok": true}\n'  # untouched
    kept = Path(result.results_dir)
    assert kept.parent == tmp_path / "work" and str(kept) in result.error
    assert json.loads((kept / "deploy.json").read_text())["ok"] is False
