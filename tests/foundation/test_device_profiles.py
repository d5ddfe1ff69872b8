"""The device profiles' two homes agree: the C++ table the kernel plans and the emulator read
(csrc/common/device_profiles.def) and the Python one `kdtree plan` reads
(python_engine/device_profiles.py), fact by fact, for every profile either names."""

from __future__ import annotations

import re

import pytest

from python_engine.device_profiles import PROFILES
from python_engine.project import PROJECT_ROOT

DEF_FILE = PROJECT_ROOT / "csrc" / "common" / "device_profiles.def"


def _literal(text: str):
    text = text.strip()
    if text.startswith('"'):
        return text.strip('"')
    if text in ("true", "false"):
        return text == "true"
    return float(text) if "." in text else int(text)


def read_def() -> dict[str, dict]:
    """The profiles of device_profiles.def, by name, each as {field: value}."""
    text = "\n".join(line.split("//")[0] for line in DEF_FILE.read_text().splitlines())
    fields_m = re.search(r"KD_DEVICE_PROFILE_FIELDS\(([^)]*)\)", text)
    assert fields_m, "device_profiles.def lost its KD_DEVICE_PROFILE_FIELDS line"
    fields = [f.strip() for f in fields_m.group(1).split(",")]
    rows = {}
    for m in re.finditer(r"KD_DEVICE_PROFILE\(([^)]*)\)", text):
        values = [_literal(v) for v in m.group(1).split(",")]
        assert len(values) == len(fields), f"{values[0]}: {len(values)} values for {len(fields)} fields"
        row = dict(zip(fields, values))
        rows[row["name"]] = row
    return rows


def test_the_def_file_reads_as_a_table():
    rows = read_def()
    assert set(rows) >= {"h200", "rtx-pro-6000"}
    assert rows["rtx-pro-6000"]["smem_optin"] == 101_376 and rows["rtx-pro-6000"]["wgmma"] is False


@pytest.mark.parametrize("name", sorted(set(PROFILES) | set(read_def())))
def test_cpp_and_python_profiles_agree(name):
    rows = read_def()
    assert name in rows and name in PROFILES, f"{name} is in one table only"
    c, p = rows[name], PROFILES[name]
    assert f"{c['cc_major']}.{c['cc_minor']}" == p.compute_capability
    assert c["sms"] == p.sm_count.value
    assert c["smem_optin"] == p.smem_per_block.value
    assert c["smem_per_sm"] == p.smem_per_sm.value
    assert c["wgmma"] == p.has_wgmma
    assert c["memory_gbps"] * 1e9 == pytest.approx(p.memory_bandwidth.value)
    assert c["bf16_dense_tflops"] * 1e12 == pytest.approx(p.bf16_dense_flops.value)
    assert 1 / c["fp32_per_fp64"] == pytest.approx(p.fp64_to_fp32.value)
