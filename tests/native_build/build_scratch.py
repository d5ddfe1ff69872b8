"""Scratch source trees for the build tests (imported by name: pytest puts this folder on
sys.path): a csrc/ laid out like the real one, with the real common/ headers, built into the
test's own folder (never the checkout's build/)."""

from __future__ import annotations

import shutil
from pathlib import Path

from native_toolchain import needs_toolchain  # noqa: F401 (the build tests import it from here)

from kdtree_cli.native_build.driver import BuildRequest
from python_engine.project import PROJECT_ROOT

# One target keeps nvcc quick here; the two-target build is what `kdtree build` does in CI.
SCRATCH_ARCH = "120"


def make_scratch_repo(root: Path, files: dict[str, str]) -> Path:
    """A repo root with csrc/common/*.h copied from the checkout plus `files` (path -> text)."""
    common = root / "csrc" / "common"
    common.mkdir(parents=True)
    for header in (PROJECT_ROOT / "csrc" / "common").glob("*.h"):
        shutil.copy(header, common / header.name)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def scratch_request(root: Path, **overrides) -> BuildRequest:
    fields = dict(repo_root=root, build_root=root / "build", arch=SCRATCH_ARCH, jobs=2)
    fields.update(overrides)
    return BuildRequest(**fields)
