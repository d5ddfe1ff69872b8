"""Faults during a deploy: the SSH connection reset at each step (through a proxy the test
controls) and after N bytes; concurrent deploys to one host; a lock held too long.

The invariant after any cut: `current` still names a complete release (every file with
its manifest hash), that release still runs, and the next deploy completes."""

from __future__ import annotations

import threading
import time

import pytest

from remote import channel
from remote.connection import connect
from remote.lock import RemoteLock
from remote.manifest import build_manifest
from remote.paths import resolve_paths
from remote.shell import q

from conftest import current_name, remote_dir, run_deploy, verify_release, write_version
from kdtree_proxy import CuttableProxy


@pytest.fixture
def proxy(sshd):
    p = CuttableProxy(sshd.port)
    yield p
    p.close()


@pytest.fixture
def proxied(sshd, proxy, tmp_path):
    """host_factory overrides that route the connection through the proxy."""
    known = tmp_path / "known_hosts_both"
    known.write_text(sshd.known_hosts_entry() + sshd.known_hosts_entry(proxy.port))
    config = sshd.write_ssh_config(tmp_path / "ssh_config_proxy", port=proxy.port, known_hosts=known)
    return {"ssh_config": str(config)}


def assert_current_works(sshd, host, expected_version: str) -> str:
    """current names a complete release, and running its check.sh over SSH prints the
    version that release was made from."""
    rdir = remote_dir(sshd, host)
    name = current_name(rdir)
    verify_release(rdir, name)
    conn = connect(host)
    try:
        out = channel.run_checked(conn, q(str(rdir / "current" / "check.sh")), what="check.sh")
    finally:
        conn.close()
    assert out.text == expected_version + "\n"
    return name


CUT_POINTS = ["locked", "staged", "uploaded", "finalized", "env", "build", "test", "switch", "switched"]


@pytest.mark.parametrize("point", CUT_POINTS)
def test_cut_at_each_step_keeps_previous_current(sshd, host_factory, proxy, proxied, project, tmp_path, rng, point):
    # the steps dawdle only while the flag file exists, so the cut can land mid-command
    dawdle = 'echo {0} start; if [ -e "$KDTREE_DIR/dawdle" ]; then sleep 1.5; fi; echo {0} end'
    steps = dict(build=("sh", "-c", dawdle.format("build")), test=("sh", "-c", dawdle.format("test")))
    direct = host_factory(**steps)
    via_proxy = host_factory(dir=direct.dir, **steps, **proxied)
    results = tmp_path / "results"
    first = run_deploy(direct, project, results, build=False, test=False)
    assert first.ok, first.error
    rdir = remote_dir(sshd, direct)
    flag = rdir / "dawdle"
    if point in ("build", "test"):
        flag.touch()

    write_version(project, "v2", rng)
    new_tree = build_manifest(project).tree_hash()[:12]

    def hook(host, at):
        if at == point:
            if point in ("build", "test"):  # cut while the remote command runs
                threading.Timer(0.4, proxy.cut).start()
            else:
                proxy.cut()

    cut = run_deploy(via_proxy, project, results, hook=hook)
    flag.unlink(missing_ok=True)
    assert not cut.ok and proxy.cuts == 1
    assert "SSH connection lost" in cut.error, cut.error
    if point == "switched":  # the switch itself completed before the cut
        assert current_name(rdir) == cut.release and cut.switched
        assert_current_works(sshd, direct, "v2")
    else:
        assert current_name(rdir) == first.release and not cut.switched
        assert_current_works(sshd, direct, "v1")

    again = run_deploy(via_proxy, project, results)
    assert again.ok, again.error
    assert current_name(rdir) == again.release and again.release.split("-")[1] == new_tree
    assert_current_works(sshd, direct, "v2")
    assert [p.name for p in (rdir / "releases").iterdir() if p.name.startswith(".")] == []


def test_cut_after_n_bytes_at_many_points(sshd, host_factory, proxy, proxied, project, tmp_path, rng):
    """Cut the link after a fraction of a deploy's client->server bytes, wherever in the
    deploy that falls (handshake, lock, upload, finalize...)."""
    direct = host_factory()
    via_proxy = host_factory(dir=direct.dir, **proxied)
    results = tmp_path / "results"
    assert run_deploy(direct, project, results, build=False, test=False).ok
    write_version(project, "v-measure", rng)
    measured = run_deploy(via_proxy, project, results, build=False, test=False)
    assert measured.ok, measured.error
    total = proxy.bytes_up
    assert total > 200_000  # the blob went through the proxy
    versions = ["v-measure"]
    for k, fraction in enumerate((0.03, 0.3, 0.6, 0.9)):
        version = f"v-cut{k}"
        write_version(project, version, rng)  # same size of change as the measured deploy
        proxy.limit = int(total * fraction)
        cut = run_deploy(via_proxy, project, results, build=False, test=False)
        proxy.limit = None
        assert not cut.ok, f"a cut at {fraction:.0%} of {total} bytes did not fail the deploy"
        assert_current_works(sshd, direct, versions[-1])
        again = run_deploy(via_proxy, project, results, build=False, test=False)
        assert again.ok, again.error
        assert_current_works(sshd, direct, version)
        versions.append(version)


def test_concurrent_deploys_to_one_host_are_serialized(sshd, host_factory, project, tmp_path):
    log_step = ('echo "start $KDTREE_RELEASE" >> "$KDTREE_DIR/events.log"; sleep 1; '
                'echo "end $KDTREE_RELEASE" >> "$KDTREE_DIR/events.log"')
    host = host_factory(build=("sh", "-c", log_step), test=None)
    outcomes = [None, None]

    def go(i):
        outcomes[i] = run_deploy(host, project, tmp_path / f"results{i}", test=False)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(o.ok for o in outcomes), [o.error for o in outcomes]
    events = (remote_dir(sshd, host) / "events.log").read_text().split("\n")[:-1]
    kinds = [e.split()[0] for e in events]
    assert kinds == ["start", "end", "start", "end"]  # never start, start
    assert events[0].split()[1] == events[1].split()[1] != events[2].split()[1] == events[3].split()[1]
    waited = [o for o in outcomes if any("waiting for the deploy lock held by" in n for _, n in o.reporter.notes)]
    assert len(waited) == 1
    names = sorted(o.release for o in outcomes)  # same tree, same second or not: two releases
    assert names[0] != names[1] and current_name(remote_dir(sshd, host)) in names


def test_lock_held_too_long_fails_with_the_holder(sshd, host_factory, project, tmp_path):
    host = host_factory(lock_timeout=1)
    holder = connect(host)
    try:
        paths = resolve_paths(holder, host)
        channel.run_checked(holder, f"mkdir -p {q(paths.dir)}", what="mkdir")
        with RemoteLock(holder, paths.python, paths.layout.lock, wait_s=1):
            started = time.monotonic()
            r = run_deploy(host, project, tmp_path / "results")
            assert time.monotonic() - started < 10
    finally:
        holder.close()
    assert not r.ok and "held" in r.error and "pid" in r.error and "lock_timeout" in r.error
    assert current_name(remote_dir(sshd, host)) is None
