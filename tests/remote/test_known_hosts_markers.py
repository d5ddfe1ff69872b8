"""known_hosts files as company setups write them: `@cert-authority` lines (kdtree cannot
check host certificates, so they are skipped, never fatal) and `@revoked` lines (the key
is refused with a host-key message, before any authentication, even with
--accept-new-host-key). Against the real test sshd."""

from __future__ import annotations

import pytest

from remote import channel
from remote.connection import connect
from remote.errors import HostKeyError

from kdtree_sshd import fingerprint_by_ssh_keygen, keygen

# an unrelated CA key (any valid ed25519 public key will do: it is never used to verify)
CA_LINE = "@cert-authority *.corp.example,10.0.0.* {key} corp-ca\n"


def accepted_logins(sshd) -> int:
    return sshd.log.read_text().count("Accepted publickey")


def test_cert_authority_lines_are_skipped(sshd, host_factory, tmp_path):
    ca = keygen(tmp_path / "ca")
    known = tmp_path / "known_hosts"
    known.write_text("# company CA\n" + CA_LINE.format(key=ca) + sshd.known_hosts_entry())
    conn = connect(host_factory(known_hosts=str(known)))
    try:
        assert channel.run(conn, "echo ok").text == "ok\n"
    finally:
        conn.close()


def test_cert_authority_only_host_is_unknown_with_a_hint(sshd, host_factory, tmp_path):
    """A host trusted only through a CA line is unknown to kdtree: the message says why."""
    ca = keygen(tmp_path / "ca")
    known = tmp_path / "known_hosts"
    known.write_text(f"@cert-authority [127.0.0.1]:{sshd.port} {ca}\n")
    with pytest.raises(HostKeyError) as err:
        connect(host_factory(known_hosts=str(known)))
    text = str(err.value)
    assert "is not in" in text and "@cert-authority" in text and "certificates" in text


def test_revoked_key_is_refused_before_authentication(sshd, host_factory, tmp_path):
    known = tmp_path / "known_hosts"
    revoked = f"@revoked * {sshd.host_key_line}\n"
    known.write_text(sshd.known_hosts_entry() + revoked)  # listed as valid AND revoked
    host = host_factory(known_hosts=str(known))
    before = accepted_logins(sshd)
    for accept in (False, True):
        with pytest.raises(HostKeyError) as err:
            connect(host, accept_new_host_key=accept)
        text = str(err.value)
        assert "REVOKED" in text and str(known) in text
        assert fingerprint_by_ssh_keygen(sshd.host_key.with_suffix(".pub")) in text
    assert accepted_logins(sshd) == before  # refused before we ever authenticated
    assert known.read_text() == sshd.known_hosts_entry() + revoked  # never rewritten


def test_revoked_key_is_never_added_by_accept_new(sshd, host_factory, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text(f"@revoked [127.0.0.1]:{sshd.port} {sshd.host_key_line}\n")
    with pytest.raises(HostKeyError, match="REVOKED"):
        connect(host_factory(known_hosts=str(known)), accept_new_host_key=True)
    assert known.read_text().count("\n") == 1


def test_revoking_another_key_changes_nothing(sshd, host_factory, tmp_path):
    other = keygen(tmp_path / "old_host_key")
    known = tmp_path / "known_hosts"
    known.write_text(f"@revoked * {other}\n" + sshd.known_hosts_entry())
    conn = connect(host_factory(known_hosts=str(known)))
    conn.close()


def test_unreadable_lines_are_skipped_not_fatal(sshd, host_factory, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text("garbage\nhost ssh-ed25519 !!!not-base64!!!\n@unknown-marker x y z\n"
                     + sshd.known_hosts_entry())
    conn = connect(host_factory(known_hosts=str(known)))
    conn.close()
