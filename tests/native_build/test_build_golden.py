"""The KDTR format bundle the C++ reader test checks: written by the Python writer, read back
equal by the Python reader, and the committed copy in refs/ is the current one."""

from __future__ import annotations

import numpy as np
from python_engine.refgen.kdtr_golden import BUNDLE_NAME, golden_tensors, write_kdtr_golden

from python_engine.project import PROJECT_ROOT
from python_engine.kdtr import Tensor, read_tensors


def test_python_reads_back_what_it_wrote(tmp_path):
    [path] = write_kdtr_golden(tmp_path)
    back = read_tensors(path)
    expected = golden_tensors()
    assert list(back) == list(expected)
    for name, value in expected.items():
        if isinstance(value, Tensor):
            assert (back[name].dtype, back[name].shape, back[name].data) == (value.dtype, value.shape, value.data)
        else:
            value = np.asarray(value)
            got = back[name].numpy()
            assert got.dtype == value.dtype and got.shape == value.shape
            assert got.tobytes() == value.tobytes()  # bit for bit: -0.0, NaN, denormals


def test_committed_bundle_is_current(tmp_path):
    [path] = write_kdtr_golden(tmp_path)
    committed = PROJECT_ROOT / "refs" / BUNDLE_NAME
    assert committed.exists(), f"{committed} missing: kdtree refs --only kdtr_format writes it"
    assert committed.read_bytes() == path.read_bytes(), "regenerate: kdtree refs --only kdtr_format"
