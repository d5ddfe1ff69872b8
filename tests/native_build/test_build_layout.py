"""What the build sweeps from csrc/: the development area (csrc/dev/, measuring builds'
instrumentation) never reaches a library or program, and is not reported as a directory without
a rule; a directory that really has no rule still is."""

from __future__ import annotations

from pathlib import Path

from kdtree_cli.native_build.layout import DEV_DIR, discover

REPO = Path(__file__).resolve().parents[2]


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_dev_sources_stay_out_of_every_target(tmp_path):
    csrc = _write(tmp_path / "csrc", {
        "kernels/kernel.cu": "__global__ void k() {}\n",
        f"{DEV_DIR}/probe.cu": "__global__ void probe() {}\n",
        f"{DEV_DIR}/marks.cuh": "#pragma once\n",
        "lab/notes.cpp": "int x;\n",
    })
    layout = discover(csrc)
    swept = {str(p) for p in layout.all_sources()}
    assert swept == {"kernels/kernel.cu"}, swept
    assert layout.unknown_dirs == ("lab",)


def test_the_repository_libraries_hold_no_dev_source():
    layout = discover(REPO / "csrc")
    swept = [p for p in layout.all_sources() if p.parts[0] == DEV_DIR]
    assert swept == []
    assert DEV_DIR not in layout.unknown_dirs
    assert (REPO / "csrc" / DEV_DIR / "README.md").is_file()
