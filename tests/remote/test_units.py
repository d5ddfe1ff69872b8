"""The pieces without a server: inventory loading and validation, the synced file list,
manifests and sync plans, quoting, line splitting, command templates."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from remote.channel import LineSplitter
from remote.errors import InventoryError
from remote.inventory import load_inventory
from remote.manifest import MANIFEST_NAME, build_manifest, list_files, plan_sync
from remote.paths import RemotePaths
from remote.shell import expand_home, join
from remote.steps import step_command

from conftest import WEIRD

# ------------------------------------------------------------------ inventory


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_project_and_user_inventories_merge_key_by_key(tmp_path):
    project = write(tmp_path / "proj" / "kdtree.toml",
                    '[defaults]\nkeep = 4\n[hosts.ct200]\nssh = "ct200"\ndir = "~/kdtree"\n'
                    'cuda_home = "/opt/cuda"\narch = [120]\ngpus = 8\npython = "python3"\n'
                    'known_hosts = "kh"\n')
    user = write(tmp_path / "user" / "hosts.toml",
                 '[hosts.ct200]\nssh = "my-ct200"\n[hosts.laptop-gpu]\nhost = "10.0.0.7"\nport = 2222\n'
                 'user = "me"\narch = ["90a", 120]\n')
    inv = load_inventory(project, user)
    ct = inv.get("ct200")
    assert (ct.ssh, ct.dir, ct.cuda_home, ct.arch, ct.gpus, ct.keep) == \
        ("my-ct200", "~/kdtree", "/opt/cuda", ("120",), 8, 4)
    assert ct.nvcc_path == "/opt/cuda/bin/nvcc" and ct.known_hosts == str(tmp_path / "proj" / "kh")
    other = inv.get("laptop-gpu")
    assert (other.host, other.port, other.user, other.arch_str, other.arch_sms) == \
        ("10.0.0.7", 2222, "me", "90a,120", (90, 120))
    assert other.target == "10.0.0.7" and other.keep == 4  # project defaults apply to user hosts


def test_repository_example_inventory_has_ct200():
    from python_engine.project import PROJECT_ROOT as repo

    ct = load_inventory(repo / "kdtree.toml", repo / "no-user-file.toml").get("ct200")
    assert (ct.ssh, ct.cuda_home, ct.arch, ct.gpus, ct.python) == ("ct200", "/opt/cuda", ("120",), 8, "python3")


@pytest.mark.parametrize("body, message", [
    ('[hosts.a]\ngpus = "eight"\n', "gpus must be an integer, got 'eight'"),
    ('[hosts.a]\nprot = 22\n', "unknown key 'prot'"),
    ('[hosts.a]\nport = 70000\n', "port must be an integer >= 1 and <= 65535"),
    ('[hosts.a]\narch = ["sm120"]\n', "arch must be an SM target"),
    ('[hosts.a]\nssh = "x"\nhost = "y"\n', "either ssh (an alias) or host, not both"),
    ('[hosts."a b"]\nssh = "x"\n', "may hold only letters"),
    ('[host.a]\nssh = "x"\n', "unknown section(s) host"),
    ('[hosts.a]\ncarry = ["../up"]\n', "folders inside the release"),
    ('[hosts.a\n', "not valid TOML"),
])
def test_inventory_errors_name_file_and_key(tmp_path, body, message):
    path = write(tmp_path / "kdtree.toml", body)
    with pytest.raises(InventoryError) as err:
        load_inventory(path, tmp_path / "none.toml")
    assert message in str(err.value) and str(path) in str(err.value)


def test_unknown_host_lists_known_ones(tmp_path):
    inv = load_inventory(write(tmp_path / "k.toml", '[hosts.b]\n[hosts.a]\n'), tmp_path / "none")
    with pytest.raises(InventoryError, match=r"unknown host 'c' \(known: a, b;"):
        inv.get("c")
    assert inv.get("a").ssh == "a"  # a bare entry: its name is its ssh alias

# ------------------------------------------------------------------ what is synced


def test_git_tree_plus_untracked_plus_refs_never_build(tmp_path, rng):
    root = tmp_path / "repo"
    files = {
        "tracked.py": "x = 1\n", "sub/dir/mod.py": "y = 2\n", "untracked_new.py": "z\n",
        "ignored.log": "noise\n", "refs/bundle.kdtr": "R", "refs/gen/ignored_too.kdtr": "R2",
        "build/out.o": "O", "build-debug/x.o": "O", ".venv/lib/x.py": "V", "results/h/r.xml": "X",
        "compile_commands.json": "[]", ".pytest_cache/v/x": "C", ".hypothesis/examples/x": "H",
        f"odd/{WEIRD}.txt": "W",
    }
    for rel, text in files.items():
        write(root / rel, text)
    write(root / ".gitignore", "*.log\nrefs/gen/\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "tracked.py", "sub", ".gitignore"], check=True)
    expected = [".gitignore", f"odd/{WEIRD}.txt", "refs/bundle.kdtr", "refs/gen/ignored_too.kdtr",
                "sub/dir/mod.py", "tracked.py", "untracked_new.py"]
    assert list_files(root) == expected
    (root / "tracked.py").unlink()  # deleted but still in the index: not synced
    assert "tracked.py" not in list_files(root)
    # outside git the folder is walked with the same exclusions (the .log is then included)
    subprocess.run(["rm", "-rf", str(root / ".git")], check=True)
    assert list_files(root) == sorted(set(expected) - {"tracked.py"} | {"ignored.log"})


def test_a_release_sends_on_its_own_files_not_what_its_steps_generated(tmp_path, rng):
    """A release has no .git: what it holds beyond its manifest was made there (a build's
    compile_commands.json, caches) and is not part of the tree it was deployed as."""
    root = tmp_path / "release"
    names = [f"src/m{i}.py" for i in range(int(rng.integers(2, 6)))] + ["refs/r.kdtr", f"odd/{WEIRD}.txt"]
    for rel in names:
        write(root / rel, f"{rel} {rng.integers(1 << 30)}\n")
    write(root / MANIFEST_NAME, build_manifest(root, names).to_json(name="r1"))
    for generated in ("compile_commands.json", ".pytest_cache/v/x", "build/release/bin/p", "src/new.tmp"):
        write(root / generated, "made by a step\n")
    write(root / "refs" / "made_by_refgen.kdtr", "R")  # refs/ is always sent, as from a checkout
    assert list_files(root) == sorted(names + ["refs/made_by_refgen.kdtr"])
    (root / names[0]).unlink()  # a file the release lost is not listed (nor hashed)
    assert list_files(root) == sorted(names[1:] + ["refs/made_by_refgen.kdtr"])


def test_manifest_and_plan(tmp_path, rng):
    root = tmp_path / "p"
    blob = rng.integers(0, 256, 10_000, dtype=np.uint8).tobytes()
    write(root / "a.txt", "a\n")
    (root / "b.bin").write_bytes(blob)
    write(root / "run.sh", "#!/bin/sh\n").chmod(0o755)
    (root / "link").symlink_to("a.txt")
    old = build_manifest(root)
    import hashlib

    assert old.files["b.bin"].sha256 == hashlib.sha256(blob).hexdigest()
    assert (old.files["run.sh"].mode, old.files["a.txt"].mode) == (0o755, 0o644)
    assert old.files["link"].link == "a.txt"
    write(root / "a.txt", "changed\n")
    (root / "run.sh").chmod(0o644)  # a mode change alone is a change
    write(root / "new.txt", "n\n")
    (root / "b.bin").unlink()
    new = build_manifest(root)
    plan = plan_sync(new, old)
    assert plan.upload == ["a.txt", "link", "new.txt", "run.sh"]  # symlinks are always sent
    assert plan.reuse == [] and plan.removed == ["b.bin"]
    assert old.tree_hash() != new.tree_hash() and build_manifest(root).tree_hash() == new.tree_hash()
    assert plan_sync(new, None).upload == sorted(new.files)

# ------------------------------------------------------------------ quoting and commands


def test_join_round_trips_through_a_real_shell():
    args = ["plain", "a b", "$(echo PWNED)", "`echo PWNED`", "'", '"', "\\", "$HOME", "*", "",
            "ünï", "new\nline", ";|&<>"]
    out = subprocess.run(["sh", "-c", "printf '%s\\0' " + join(args)], capture_output=True, check=True).stdout
    assert out.split(b"\0")[:-1] == [a.encode() for a in args]


def test_expand_home():
    assert expand_home("~/kd", "/home/u") == "/home/u/kd"
    assert expand_home("kd", "/home/u") == "/home/u/kd"
    assert expand_home("/abs", "/home/u") == "/abs" and expand_home("~", "/h") == "/h"
    assert expand_home("~other/x", "/h") == "/h/~other/x"  # never another user's home


def test_step_commands_default_to_kdtree_build_and_test(tmp_path):
    inv = load_inventory(write(tmp_path / "k.toml",
                               '[hosts.ct200]\narch = [120]\ngpus = 8\ncuda_home = "/opt/cuda"\n'
                               '[hosts.cpu]\ntest_args = ["--", "tests/foundation", "-q"]\n'),
                         tmp_path / "none")
    paths = RemotePaths(dir="/r", python="python3", nvcc="/opt/cuda/bin/nvcc", cuda_home="/opt/cuda")
    build = step_command(inv.get("ct200"), paths, "/r/venv/bin/python", "/r/releases/x", "build")
    test = step_command(inv.get("ct200"), paths, "/r/venv/bin/python", "/r/releases/x", "test")
    assert build.startswith("cd /r/releases/x && export ")
    assert build.endswith("exec /r/venv/bin/python -m kdtree_cli build --arch 120")
    assert test.endswith("exec /r/venv/bin/python -m kdtree_cli test --native --arch 120")
    assert "CUDA_HOME=/opt/cuda" in build and "PATH=/opt/cuda/bin:" in build
    smi = load_inventory(write(tmp_path / "k2.toml", '[hosts.box]\ngpus = 1\nnvidia_smi = "/usr/local/nvidia/bin/nvidia-smi"\n'),
                         tmp_path / "none").get("box")
    assert "PATH=/opt/cuda/bin:/usr/local/nvidia/bin:" in step_command(smi, paths, "py", "/r/releases/x", "build")
    cpu = step_command(inv.get("cpu"), paths, "py", "/r/releases/x", "test")
    assert cpu.endswith("exec py -m kdtree_cli test -- tests/foundation -q")


def test_line_splitter_handles_split_utf8_and_crlf():
    text = "première ligne\r\nzweite Zeile ünï\nno newline at end"
    data = text.encode()
    for cut in range(1, len(data)):
        s = LineSplitter()
        lines = s.feed(data[:cut]) + s.feed(data[cut:]) + s.flush()
        assert lines == ["première ligne", "zweite Zeile ünï", "no newline at end"]


def test_release_tool_runs_with_a_bare_python(tmp_path):
    """The remote helper needs only the standard library, even under -I -S."""
    from remote.releases import TOOL_SOURCE

    out = subprocess.run([sys.executable, "-I", "-S", "-c", TOOL_SOURCE, "state", '{"dir": "%s"}' % tmp_path],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == '{"current": null, "current_ok": false, "releases": [], "partials": [], "base": null, "manifest": null}'


def test_release_names_sort_by_time_within_one_second(tmp_path, rng):
    """Pruning keeps the newest releases by name: two deploys in the same second must still
    sort in the order they were made, whatever their tree hashes."""
    from remote.releases import release_name

    manifests = []
    for i in range(6):
        (tmp_path / "f.txt").write_text(f"{i} {rng.integers(1 << 30)}\n")
        manifests.append(build_manifest(tmp_path, ["f.txt"]))
    base = 1_795_000_000.0 + float(rng.random())  # a fixed second, random offset inside it
    times = [base + k * 0.00011 for k in range(6)]
    names = [release_name(m, t) for m, t in zip(manifests, times)]
    assert sorted(names) == names
    assert len({n.split("-")[0] for n in names}) == 6
