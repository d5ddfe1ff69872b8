"""The facts each supported GPU gives the plans: one table, every value with its source.

`kdtree plan` projects a host's memory and round time from these; the kernel plans and the
emulator read the same facts on the C++ side. A value from a datasheet or the CUDA
programming guide is a spec (what the part promises), never a measurement: `Fact.kind`
says which, and `Fact.source` where it comes from, so every output that uses one can name it.
"""

from __future__ import annotations

from dataclasses import dataclass

from python_engine.errors import KdtreeError

GIB = 1 << 30

# Sources, cited once each and referred to by the facts below.
CUDA_GUIDE = "CUDA C++ Programming Guide, technical specifications per compute capability"
H200_DATASHEET = "NVIDIA H200 datasheet (H200 SXM)"
RTX_SPECS = ("NVIDIA RTX PRO 6000 Blackwell specs as published (gpu.name, hmc-tech.com; NVIDIA's RTX PRO "
             "Blackwell table quoted in NVIDIA/cudnn-frontend#1164)")
PCIE5_SPEC = "PCI Express 5.0: 32 GT/s a lane, 128b/130b, x16"
NVLINK4_SPEC = "NVIDIA H200 datasheet: NVLink 900 GB/s a GPU, both directions"
MEASURED_H200_SMS = "results/h200/bench/all-bench.md (commit 7508c8f)"


@dataclass(frozen=True)
class Fact:
    value: float
    unit: str
    source: str
    kind: str = "spec"  # "spec" (datasheet, guide) or "measured" (results/)

    def describe(self) -> str:
        return f"{self.kind}: {self.source}"


@dataclass(frozen=True)
class DeviceProfile:
    """One GPU model. Memory and bandwidth in bytes and bytes/s; shared memory in bytes."""

    name: str
    chip: str
    compute_capability: str
    sm_count: Fact
    memory: Fact
    memory_bandwidth: Fact
    smem_per_block: Fact
    smem_per_sm: Fact
    bf16_dense_flops: Fact
    fp64_to_fp32: Fact
    has_wgmma: bool
    interconnect: str  # "nvlink" or "pcie": between GPUs of one host
    link_bandwidth: Fact  # one direction, one GPU, bytes/s

    def facts(self) -> dict[str, Fact]:
        return {k: v for k, v in self.__dict__.items() if isinstance(v, Fact)}


PROFILES: dict[str, DeviceProfile] = {
    "h200": DeviceProfile(
        name="h200", chip="GH100", compute_capability="9.0",
        sm_count=Fact(132, "SMs", MEASURED_H200_SMS, "measured"),
        memory=Fact(141e9, "B", H200_DATASHEET + ": 141 GB HBM3e"),
        memory_bandwidth=Fact(4.8e12, "B/s", H200_DATASHEET + ": 4.8 TB/s"),
        smem_per_block=Fact(232_448, "B", CUDA_GUIDE + ": 227 KB for 9.0"),
        smem_per_sm=Fact(233_472, "B", CUDA_GUIDE + ": 228 KB for 9.0"),
        bf16_dense_flops=Fact(989e12, "FLOP/s", H200_DATASHEET + ": 1,979 TFLOPS bf16 with sparsity, half dense"),
        fp64_to_fp32=Fact(0.5, "ratio", H200_DATASHEET + ": FP64 34 TFLOPS, FP32 67"),
        has_wgmma=True,
        interconnect="nvlink",
        link_bandwidth=Fact(450e9, "B/s", NVLINK4_SPEC),
    ),
    "rtx-pro-6000": DeviceProfile(
        name="rtx-pro-6000", chip="GB202", compute_capability="12.0",
        sm_count=Fact(188, "SMs", RTX_SPECS + ": 188 SMs of GB202's 192"),
        memory=Fact(96 * GIB, "B", RTX_SPECS + ": 96 GB GDDR7, 32 chips of 3 GiB"),
        memory_bandwidth=Fact(1.792e12, "B/s", RTX_SPECS + ": 1,792 GB/s, 512-bit GDDR7"),
        smem_per_block=Fact(101_376, "B", CUDA_GUIDE + ": 99 KB for 12.0"),
        smem_per_sm=Fact(102_400, "B", CUDA_GUIDE + ": 100 KB for 12.0"),
        bf16_dense_flops=Fact(503.8e12, "FLOP/s", RTX_SPECS + ": bf16 tensor 503.8 TFLOPS dense, FP32 accumulate"),
        fp64_to_fp32=Fact(1 / 64, "ratio", RTX_SPECS + ": FP64 1.97 TFLOPS, FP32 126"),
        has_wgmma=False,
        interconnect="pcie",
        link_bandwidth=Fact(63.0e9, "B/s", PCIE5_SPEC),
    ),
}


def device_profile(name: str) -> DeviceProfile:
    """The profile called `name` (h200, rtx-pro-6000); a KdtreeError lists the known ones."""
    key = name.strip().lower()
    if key not in PROFILES:
        raise KdtreeError(f"device profile {name!r} is not known: choose {', '.join(sorted(PROFILES))}")
    return PROFILES[key]
