"""Writers of the reference bundles in refs/ (KDTR files the native tests read).

Each generator is a function `(out_dir: Path) -> list[Path]` that writes its bundles
deterministically from fixed seeds: `kdtree refs --check` regenerates them into a temporary
folder and compares bytes with the committed ones.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Callable

# name -> "module:function"; imported lazily so a generator's heavy deps (torch) load only
# when it runs.
GENERATORS: dict[str, str] = {
    "ddtree": "python_engine.refgen.ddtree_refs:write_ddtree_refs",
    "kdtr_format": "python_engine.refgen.kdtr_golden:write_kdtr_golden",
    "kernels": "python_engine.refgen.kernel_refs:write_kernel_refs",
    "model": "python_engine.refgen.model_refs:write_model_refs",
}


def load_generator(name: str) -> Callable[[Path], list[Path]]:
    module, func = GENERATORS[name].split(":")
    return getattr(importlib.import_module(module), func)
