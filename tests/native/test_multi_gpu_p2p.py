"""The ranks' NCCL peer-to-peer setting (KDTREE_P2P, a host's `p2p` key) and the engine
check's refusal of a host configured with several GPUs but no usable NCCL."""

from __future__ import annotations

import pytest
import rank_workers

from python_engine.errors import KdtreeError
from python_engine.native import multi_gpu


@pytest.mark.parametrize("setting,names,caller,expected", [
    ("off", ["NVIDIA H200"], None, {"NCCL_P2P_DISABLE": "1"}),
    ("on", ["NVIDIA RTX PRO 6000 Blackwell Server Edition"], None, {}),
    ("auto", ["NVIDIA RTX PRO 6000 Blackwell Server Edition"] * 8, None, {"NCCL_P2P_DISABLE": "1"}),
    ("auto", ["NVIDIA H200", "NVIDIA H200"], None, {}),
    ("auto", ["NVIDIA RTX PRO 6000 Blackwell Server Edition"], "0", {}),  # the caller's own setting stands
])
def test_p2p_environment(monkeypatch, setting, names, caller, expected):
    if caller is None:
        monkeypatch.delenv("NCCL_P2P_DISABLE", raising=False)
    else:
        monkeypatch.setenv("NCCL_P2P_DISABLE", caller)
    assert multi_gpu.p2p_environment(setting, names) == expected


def test_p2p_setting_reaches_every_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("KDTREE_P2P", "off")
    results = multi_gpu.launch_ranks(2, rank_workers.report, (str(tmp_path), ["NCCL_P2P_DISABLE"]), nccl_id=b"x",
                                     grace_s=0.5, term_s=0.5)
    assert [r["env"]["NCCL_P2P_DISABLE"] for r in results] == ["1", "1"]
    monkeypatch.setenv("KDTREE_P2P", "sometimes")
    with pytest.raises(KdtreeError, match="KDTREE_P2P='sometimes'"):
        multi_gpu.launch_ranks(2, rank_workers.report, (str(tmp_path), []), nccl_id=b"x")


def test_a_split_host_without_nccl_fails_the_check(monkeypatch):
    from python_engine.native import library

    def no_nccl(variant="gpu"):
        raise KdtreeError("this engine was built without NCCL (no nccl.h found)")

    monkeypatch.setattr(library, "nccl_unique_id", no_nccl)
    multi_gpu.check_split_ready(1)  # one GPU needs no NCCL
    with pytest.raises(KdtreeError, match="gpus = 8, and NCCL is not usable here.*built without NCCL"):
        multi_gpu.check_split_ready(8)
    monkeypatch.setattr(library, "nccl_unique_id", lambda variant="gpu": bytes(128))
    multi_gpu.check_split_ready(8)


