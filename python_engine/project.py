"""Where this checkout is: the one project-root constant. Everything that reads or writes
files of the repository (refs/, results/, csrc/, the build folder, pytest's working
directory) starts from PROJECT_ROOT, the folder holding pyproject.toml."""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
