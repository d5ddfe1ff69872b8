"""The `profile` host key: the inventory reads and checks it against the device profiles, and
the deploy's steps (build, tests, engine check) carry it to the host as KDTREE_DEVICE_PROFILE,
which an explicit `env` entry still overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from python_engine.device_profiles import PROFILES
from remote.errors import InventoryError
from remote.inventory import load_inventory
from remote.paths import RemotePaths
from remote.steps import step_env


def inventory(tmp_path: Path, body: str):
    path = tmp_path / "kdtree.toml"
    path.write_text(body)
    return load_inventory(path, tmp_path / "none.toml")


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_profile_key_is_read_and_reaches_the_steps(tmp_path, name):
    inv = inventory(tmp_path, f'[hosts.box]\nprofile = "{name}"\n[hosts.plain]\nhost = "x"\n')
    paths = RemotePaths("/r", "python3", "nvcc", None)
    env, _ = step_env(inv.get("box"), paths, "python3", "/r/releases/x")
    assert env["KDTREE_DEVICE_PROFILE"] == name
    env, _ = step_env(inv.get("plain"), paths, "python3", "/r/releases/x")
    assert "KDTREE_DEVICE_PROFILE" not in env


def test_an_unknown_profile_is_refused_with_the_known_ones(tmp_path):
    with pytest.raises(InventoryError, match=r"profile must be a device profile \(h200, rtx-pro-6000\)"):
        inventory(tmp_path, '[hosts.box]\nprofile = "rtx-pro-9000"\n')


def test_an_explicit_env_entry_overrides_the_profile(tmp_path):
    inv = inventory(tmp_path, '[hosts.box]\nprofile = "rtx-pro-6000"\nenv = { KDTREE_DEVICE_PROFILE = "h200" }\n')
    env, _ = step_env(inv.get("box"), RemotePaths("/r", "python3", "nvcc", None), "python3", "/r/releases/x")
    assert env["KDTREE_DEVICE_PROFILE"] == "h200"
