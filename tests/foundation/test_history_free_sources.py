"""Source comments say what is true now: no "stop N" / "lease N" (the GPU sessions a change was
measured in) and no issue numbers in the product's folders. A measured reason links to the doc
that holds it (docs/kernels/, results/<device>/<area>/README.md) instead; the sessions'
records are in git history (tag lab-notebook-final)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from python_engine.project import PROJECT_ROOT

FOLDERS = ("csrc", "python_engine", "kdtree_cli", "remote", "scripts")
SOURCE_SUFFIXES = {".py", ".cu", ".cuh", ".h", ".hpp", ".c", ".cc", ".cpp", ".def", ".sh", ".toml", ".map"}

# "stop 41", "lease 3", "stop41/lease5", "leases 4-6": a session of the GPU machine
SESSION = re.compile(r"\b(?:stop|lease)s?\s?#?\d+", re.IGNORECASE)
# "issue 13", "issues 11, 12", "issue #7": the project's tracker (an upstream bug is cited by its URL)
ISSUE = re.compile(r"\bissues?\s?#?\d+", re.IGNORECASE)


def offences(line: str) -> list[str]:
    return [m.group(0) for pattern in (SESSION, ISSUE) for m in pattern.finditer(line)]


def source_files() -> list[Path]:
    """The tracked source files of FOLDERS (every file below them outside a git checkout)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--", *FOLDERS], cwd=PROJECT_ROOT, capture_output=True)
    if listed.returncode == 0 and listed.stdout:
        paths = [PROJECT_ROOT / p for p in listed.stdout.decode().split("\0") if p]
    else:
        paths = [p for folder in FOLDERS for p in (PROJECT_ROOT / folder).rglob("*")]
    return sorted(p for p in paths if p.suffix in SOURCE_SUFFIXES and p.is_file())


@pytest.mark.parametrize("line", [
    "// measured at stop 41 (results/h200/bench/stop41/lease3): 154.9 / 163.6 us",
    "# stop 28's lease 5 skipped the bench",
    "(stop41/scripts/plan_sweep.cpp; stop41/lease5)",
    "// Config 10 (timed in leases 4-6)",
    "\"\"\"the pair the DDTree == AR check runs on (issue 12)\"\"\"",
    "// H=64 n=1 against issue 13's 15 us",
    "# see issues 11, 12 and Issue #14",
])
def test_the_patterns_catch_session_and_issue_numbers(line):
    assert offences(line), line


@pytest.mark.parametrize("line", [
    "// the other warps issue the next tile's copies meanwhile",
    "stop tokens end a request; a stop is checked after each round",
    "// a warp's issue slots count (~1300 SASS instructions a tile)",
    "known_hosts is read here (https://github.com/paramiko/paramiko/issues/1219)",
    "if stop_ids and token in stop_ids: break",
])
def test_the_patterns_leave_ordinary_words(line):
    assert not offences(line), offences(line)


def test_sources_name_no_session_or_issue_numbers():
    files = source_files()
    assert len(files) > 100, f"found only {len(files)} source files under {FOLDERS}"
    found = []
    for path in files:
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if hits := offences(line):
                found.append(f"{path.relative_to(PROJECT_ROOT)}:{number}: {', '.join(hits)}: {line.strip()[:120]}")
    assert not found, ("say what is true now and link to the doc that holds the measurement "
                       "(docs/kernels/, results/):\n" + "\n".join(found))
