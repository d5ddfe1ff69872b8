"""`kdtree refs --check`'s comparison (python_engine/refgen/compare.py): regenerated bundles
agree with the committed ones to float rounding, and any other change is caught."""

from __future__ import annotations

import numpy as np
import pytest

from python_engine.kdtr import write_kdtr
from python_engine.refgen.compare import FLOAT_RTOL, bundle_differences


def _bundle(tmp_path, name, tensors):
    return write_kdtr(tmp_path / f"{name}.kdtr", tensors)


@pytest.fixture
def base(seed):
    rng = np.random.default_rng(seed)
    return {
        "logits": (rng.standard_normal((12, 16)) * 5).astype(np.float32),
        "tokens": rng.integers(0, 4096, (3, 9)).astype(np.int32),
        "mask": rng.random((4, 4)) < 0.5,
        "wide": rng.standard_normal(7).astype(np.float64),
    }


def test_identical_and_rounded_bundles_agree(tmp_path, base):
    a = _bundle(tmp_path, "a", base)
    assert bundle_differences(a, _bundle(tmp_path, "b", dict(base))) == []
    # what another CPU's kernels give: every float a few ulps away
    rounded = dict(base)
    rounded["logits"] = np.nextafter(base["logits"], np.float32(np.inf)) * np.float32(1 + 2e-7)
    rounded["wide"] = base["wide"] * (1 + 1e-12)
    assert bundle_differences(a, _bundle(tmp_path, "c", rounded)) == []


@pytest.mark.parametrize("change", ["float", "int", "bool", "shape", "dtype", "nan", "missing"])
def test_real_changes_are_caught(tmp_path, base, change):
    other = {k: v.copy() for k, v in base.items()}
    scale = float(np.abs(base["logits"]).max())
    if change == "float":  # 100x the tolerance on one element
        other["logits"][3, 5] += 100 * FLOAT_RTOL * scale
    elif change == "int":
        other["tokens"][1, 2] += 1
    elif change == "bool":
        other["mask"][0, 0] = not other["mask"][0, 0]
    elif change == "shape":
        other["tokens"] = other["tokens"][:, :8].copy()
    elif change == "dtype":
        other["tokens"] = other["tokens"].astype(np.int64)
    elif change == "nan":
        other["logits"][0, 0] = np.nan
    else:
        del other["wide"]
    why = bundle_differences(_bundle(tmp_path, "a", base), _bundle(tmp_path, "b", other))
    assert len(why) == 1, why
    assert why[0].startswith("wide" if change == "missing" else
                             {"float": "logits", "nan": "logits", "bool": "mask"}.get(change, "tokens")), why


def test_a_damaged_bundle_differs(tmp_path, base):
    a, b = _bundle(tmp_path, "a", base), _bundle(tmp_path, "b", base)
    blob = bytearray(b.read_bytes())
    blob[-1] ^= 0xFF
    b.write_bytes(bytes(blob))
    why = bundle_differences(a, b)
    assert len(why) == 1 and why[0].startswith("unreadable"), why
