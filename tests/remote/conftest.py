"""Fixtures for the remote tests: a real sshd (kdtree_sshd.py), a small synthetic project
to deploy, host configs pointing at the server, and helpers that look at the "remote"
directory directly on disk (the server is this machine) to check what a deploy left."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

from remote.deploy import DeployOptions, HostResult, deploy_host
from remote.inventory import HostConfig
from remote.output import CollectingReporter

from kdtree_sshd import ALIAS, SSHD, SshServer, start_sshd

WEIRD = "sp ace $(touch PWNED) `touch PWNED2` 'q' \"dq\" $HOME ;"

FAKE_KDTREE_MAIN = r'''
import json, os, sys, time
args = sys.argv[1:]
if args[:1] == ["echo-args"]:
    print(json.dumps(args[1:]))
elif args[:1] == ["slow"]:
    print("first", flush=True)
    time.sleep(float(args[1]))
    print("second", flush=True)
elif args[:1] == ["run"] and "--metrics" in args:  # a stand-in engine: slow metrics lines
    def opt(name, default):
        return type(default)(args[args.index(name) + 1]) if name in args else default
    metrics, rounds, delay = args[args.index("--metrics") + 1], opt("--rounds", 20), opt("--delay", 0.05)
    with open(os.path.join(os.environ["KDTREE_DIR"], "run-starts.log"), "a") as log:
        log.write(metrics + "\n")
    print("loading the stand-in model", file=sys.stderr, flush=True)
    with open(metrics, "a") as out:
        out.write(json.dumps({"event": "run_start", "t": 0.0, "engine": "stand-in"}) + "\n")
        out.flush()
        for i in range(rounds):
            time.sleep(delay)
            out.write(json.dumps({"event": "round", "t": (i + 1) * delay, "round": i,
                                  "accept_len": 1 + i % 3, "pad": "x" * (i * 37 % 200)}) + "\n")
            out.flush()
        if "--fail" in args:
            print("stand-in engine: out of memory", file=sys.stderr)
            sys.exit(4)
        out.write(json.dumps({"event": "run_end", "t": (rounds + 1) * delay, "rounds": rounds}) + "\n")
elif args[:1] == ["serve"]:  # a stand-in server: answers GET on --port with its arguments; GET /stop ends it
    import http.server, threading
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"argv": args}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            if self.path == "/stop":
                threading.Thread(target=self.server.shutdown).start()
        def log_message(self, *_):
            pass
    server = http.server.HTTPServer(("127.0.0.1", int(args[args.index("--port") + 1])), Handler)
    print("kdtree serve: listening on http://127.0.0.1:%d" % server.server_port, file=sys.stderr, flush=True)
    server.serve_forever()
elif args[:1] == ["fail"]:
    print("out line", flush=True)
    print("err line", file=sys.stderr, flush=True)
    sys.exit(int(args[1]))
else:
    env = {k: os.environ.get(k) for k in ("KDTREE_HOST", "KDTREE_RESULTS_DIR", "PYTHONPATH", "KDTREE_DEVICE_PROFILE")}
    print(json.dumps({"argv": args, "cwd": os.getcwd(), "env": env}))
'''

TINY_TEST = '''
from pathlib import Path

def test_version_file_is_complete():
    text = (Path(__file__).parents[1] / "app" / "version.txt").read_text()
    assert text.startswith("v") and text.endswith("\\n")
'''


@pytest.fixture(scope="session")
def sshd(tmp_path_factory) -> SshServer:
    if not os.path.exists(SSHD):
        pytest.skip("openssh-server is not installed (apt-get install -y openssh-server)")
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def jump_sshd(sshd, tmp_path_factory) -> SshServer:
    """A second server on another loopback port, used as a ProxyJump host."""
    server = start_sshd(tmp_path_factory.mktemp("jump-sshd"))
    yield server
    server.stop()


def write_version(project: Path, version: str, rng: np.random.Generator) -> None:
    """Change the project the way an edit does: a small text file and a 200 KB blob."""
    (project / "app").mkdir(exist_ok=True)
    (project / "app" / "version.txt").write_text(version + "\n")
    (project / "data").mkdir(exist_ok=True)
    (project / "data" / "blob.bin").write_bytes(rng.integers(0, 256, 200_000, dtype=np.uint8).tobytes())


def make_project(root: Path, rng: np.random.Generator, version: str = "v1") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "kdtree_cli").mkdir()
    (root / "kdtree_cli" / "__init__.py").write_text("")
    (root / "kdtree_cli" / "__main__.py").write_text(FAKE_KDTREE_MAIN)
    write_version(root, version, rng)
    check = root / "check.sh"
    check.write_text('#!/bin/sh\ncat "$(dirname "$0")/app/version.txt"\n')
    check.chmod(0o755)
    (root / "refs").mkdir()
    (root / "refs" / "ref.bin").write_bytes(rng.integers(0, 256, 4096, dtype=np.uint8).tobytes())
    (root / "odd dir").mkdir()
    (root / "odd dir" / f"{WEIRD}.txt").write_text("weird name, plain content\n")
    (root / "tests_remote").mkdir()
    (root / "tests_remote" / "test_tiny.py").write_text(TINY_TEST)
    for never in ("build", ".venv", "results", "build-debug"):  # must not be synced
        (root / never).mkdir()
        (root / never / "junk.txt").write_text("never synced\n")
    return root


@pytest.fixture
def project(tmp_path, rng) -> Path:
    return make_project(tmp_path / "project", rng)


@pytest.fixture
def host_factory(sshd):
    """HostConfig for the test server; each call gets its own remote dir under ~/."""

    def make(**overrides) -> HostConfig:
        values = dict(
            name="sshd-test", ssh=ALIAS, ssh_config=str(sshd.ssh_config), dir=f"~/kd-{uuid.uuid4().hex[:8]}",
            python=sys.executable, venv=False, gpus=0, arch=("120",), connect_timeout=5, carry=(),
            build=("sh", "-c", 'echo "building for sm_$KDTREE_ARCH in $KDTREE_RELEASE"'),
            test=("{python}", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests_remote",
                  "--junitxml={results}/junit.xml"),
            keep=3, lock_timeout=60, source="tests/remote",
        )
        values.update(overrides)
        return HostConfig(**values)

    return make


def remote_dir(sshd: SshServer, host: HostConfig) -> Path:
    return Path(host.dir.replace("~", str(sshd.home), 1))


def run_deploy(host: HostConfig, project: Path, results: Path, **opts) -> HostResult:
    """deploy_host with a collecting reporter; the work folder (where a failed deploy's
    logs stay) is results' sibling `deploy-work/` unless given."""
    reporter = CollectingReporter()
    opts.setdefault("work_root", results.parent / "deploy-work")
    result = deploy_host(host, DeployOptions(project_root=project, results_root=results, **opts), reporter)
    result.reporter = reporter  # type: ignore[attr-defined]  (for assertions on the output)
    return result


def current_name(folder: Path) -> str | None:
    try:
        return os.path.basename(os.readlink(folder / "current"))
    except OSError:
        return None


def verify_release(folder: Path, name: str) -> dict:
    """Every file of the release's manifest is there with its hash and mode (oracle: the
    manifest the local side wrote, checked with hashlib here); returns the manifest."""
    release = folder / "releases" / name
    manifest = json.loads((release / ".kdtree-release.json").read_text())
    for rel, entry in manifest["files"].items():
        data = (release / rel).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], rel
        assert (os.stat(release / rel).st_mode & 0o777) == entry["mode"], rel
    return manifest
