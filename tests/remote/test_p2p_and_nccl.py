"""The `p2p` host key and NCCL for hosts with several GPUs: the inventory reads and checks
the key, the deploy's steps carry it (and the GPU count) to the host, and `kdtree hosts`
says when a several-GPU host has no NCCL (tests/native/test_multi_gpu_p2p.py: the ranks'
side and the engine check)."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote.errors import InventoryError
from remote.inventory import SPLIT_EXTRA, HostConfig, load_inventory
from remote.paths import RemotePaths
from remote.probe import check_host
from remote.steps import step_env

from test_remote_env import fake_program


def inventory(tmp_path: Path, body: str):
    path = tmp_path / "kdtree.toml"
    path.write_text(body)
    return load_inventory(path, tmp_path / "none.toml")


def test_p2p_key_is_read_checked_and_reaches_the_steps(tmp_path):
    inv = inventory(tmp_path, '[hosts.box]\ngpus = 8\np2p = "off"\n[hosts.one]\ngpus = 1\n')
    box, one = inv.get("box"), inv.get("one")
    assert (box.p2p, one.p2p) == ("off", "auto")
    paths = RemotePaths("/r", "python3", "nvcc", None)
    env, _ = step_env(box, paths, "python3", "/r/releases/x")
    assert env["KDTREE_P2P"] == "off" and env["KDTREE_GPUS"] == "8"
    with pytest.raises(InventoryError, match='p2p must be "auto", "on" or "off"'):
        inventory(tmp_path, '[hosts.box]\np2p = "maybe"\n')
    # the project's own ct200 entry says what the RTX PRO 6000 box needs
    assert load_inventory(Path("kdtree.toml"), tmp_path / "none.toml").get("ct200").p2p == "off"


def test_several_gpus_bring_nccls_wheel_unless_extras_are_chosen():
    assert SPLIT_EXTRA in HostConfig(name="a", gpus=8).extras
    assert SPLIT_EXTRA not in HostConfig(name="a", gpus=1).extras
    assert HostConfig(name="a", gpus=8, extras=("dev",)).extras == ("dev",)


def test_hosts_check_names_a_split_host_without_nccl(sshd, host_factory, tmp_path):
    smi = fake_program(tmp_path / "nvidia-smi", "\n".join(["NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0"] * 8))
    cuda = tmp_path / "cuda"
    (cuda / "lib64").mkdir(parents=True)
    # no ldconfig on this PATH: only the toolkit's folder can show NCCL
    host = host_factory(gpus=8, extras=(), nvidia_smi=smi, cuda_home=str(cuda), env={"PATH": "/nonexistent"})
    text = "\n".join(check_host(host).problems)
    assert "gpus = 8 but NCCL is nowhere to be found" in text and "'gpus'" in text
    (cuda / "lib64" / "libnccl.so.2").write_bytes(b"")
    assert "NCCL" not in "\n".join(check_host(host).problems)
    with_wheel = host_factory(gpus=8, extras=("test", "gpus"), nvidia_smi=smi, cuda_home=str(tmp_path / "none"),
                              env={"PATH": "/nonexistent"})
    assert "NCCL" not in "\n".join(check_host(with_wheel).problems)
