"""What a release holds is exactly its manifest, and nothing a later deploy does can change
a release that is current: unchanged files are verified by hash and copied (never shared
with the live release), and symlinks that leave the tree are refused before anything is
sent. Against the real test sshd."""

from __future__ import annotations

import hashlib
import os

import pytest

from remote.errors import RemoteError
from remote.manifest import build_manifest

from conftest import current_name, remote_dir, run_deploy, verify_release, write_version


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_write_in_place_during_the_next_deploy_never_reaches_current(sshd, host_factory, project, tmp_path, rng):
    """The new release's build appends to a file that did not change (it is reused from the
    current release) and then fails: current must be byte for byte what it was."""
    host = host_factory(build=("sh", "-c", "printf tampered >> refs/ref.bin; exit 1"))
    host_first = host_factory(dir=host.dir)
    first = run_deploy(host_first, project, tmp_path / "results", build=False, test=False)
    assert first.ok, first.error
    rdir = remote_dir(sshd, host)
    before = sha(rdir / "current" / "refs" / "ref.bin")
    write_version(project, "v3", rng)
    bad = run_deploy(host, project, tmp_path / "results", test=False)
    assert not bad.ok and "build failed" in bad.error
    assert current_name(rdir) == first.release
    assert sha(rdir / "current" / "refs" / "ref.bin") == before
    verify_release(rdir, first.release)  # every file of current still has its manifest hash
    tampered = rdir / "releases" / bad.release / "refs" / "ref.bin"
    assert tampered.read_bytes().endswith(b"tampered")  # the step did write, in its own copy


def test_a_damaged_file_of_the_previous_release_is_sent_again(sshd, host_factory, project, tmp_path, rng):
    """Same size, other bytes (a write in place on the remote): a size check would reuse it."""
    host = host_factory()
    first = run_deploy(host, project, tmp_path / "results", build=False, test=False)
    assert first.ok, first.error
    rdir = remote_dir(sshd, host)
    blob = rdir / "releases" / first.release / "data" / "blob.bin"
    data = bytearray(blob.read_bytes())
    data[:16] = bytes(255 - b for b in data[:16])
    blob.write_bytes(bytes(data))

    (project / "app" / "version.txt").write_text("v2\n")  # the blob itself is unchanged locally
    second = run_deploy(host, project, tmp_path / "results", build=False, test=False)
    assert second.ok, second.error
    assert second.uploaded == 2  # version.txt, and the blob whose copy failed its hash
    verify_release(rdir, second.release)
    assert sha(rdir / "releases" / second.release / "data" / "blob.bin") == sha(project / "data" / "blob.bin")


def test_reused_files_keep_their_times_so_builds_stay_incremental(sshd, host_factory, project, tmp_path):
    host = host_factory()
    first = run_deploy(host, project, tmp_path / "results", build=False, test=False)
    assert first.ok, first.error
    rdir = remote_dir(sshd, host)
    old = rdir / "releases" / first.release / "refs" / "ref.bin"
    os.utime(old, (1_600_000_000, 1_600_000_000))
    (project / "app" / "version.txt").write_text("v2\n")
    second = run_deploy(host, project, tmp_path / "results", build=False, test=False)
    assert second.ok, second.error
    new = rdir / "releases" / second.release / "refs" / "ref.bin"
    assert os.stat(new).st_ino != os.stat(old).st_ino  # a copy ...
    assert os.stat(new).st_mtime == 1_600_000_000  # ... with the old time: not "changed"
    assert os.stat(rdir / "releases" / second.release / "app" / "version.txt").st_mtime > 1_600_000_000


@pytest.mark.parametrize("target", ["/etc/hostname", "../../outside.txt", "../app/../../x.txt"])
def test_symlink_leaving_the_tree_is_refused_before_connecting(project, tmp_path, target):
    from remote.deploy import DeployOptions, deploy_host
    from remote.inventory import HostConfig
    from remote.output import CollectingReporter

    (project / "app" / "escape").symlink_to(target)
    with pytest.raises(RemoteError) as err:
        build_manifest(project)
    assert "app/escape" in str(err.value) and target in str(err.value)
    # the deploy says so before it tries to connect (this host does not exist)
    host = HostConfig(name="nowhere", host="127.0.0.1", port=1, connect_timeout=2,
                      known_hosts=str(tmp_path / "kh"))
    result = deploy_host(host, DeployOptions(project_root=project, results_root=tmp_path / "r",
                                             work_root=tmp_path / "work"), CollectingReporter())
    assert not result.ok and "app/escape" in result.error and "unreachable" not in result.error


def test_symlink_inside_the_tree_is_kept(sshd, host_factory, project, tmp_path):
    (project / "app" / "current_version").symlink_to("version.txt")
    (project / "top_link").symlink_to("app/version.txt")
    host = host_factory()
    r = run_deploy(host, project, tmp_path / "results", build=False, test=False)
    assert r.ok, r.error
    release = remote_dir(sshd, host) / "releases" / r.release
    assert os.readlink(release / "app" / "current_version") == "version.txt"
    assert (release / "top_link").read_text() == "v1\n"
