"""Regenerate refs/ and compare: the work behind `kdtree refs` and `kdtree refs --check`."""

from __future__ import annotations

import filecmp
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from python_engine.project import PROJECT_ROOT
from python_engine.refgen import GENERATORS, load_generator
from python_engine.refgen.compare import bundle_differences

DEFAULT_REFS_DIR = PROJECT_ROOT / "refs"


@dataclass
class RefsReport:
    """What regenerating did (or would do) to the committed bundles, by relative path."""

    unchanged: list[str] = field(default_factory=list)
    # float tensors differ only by rounding (another CPU's kernels: compare.py); kept as committed
    rounding: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    why: dict[str, list[str]] = field(default_factory=dict)  # changed bundle -> what differs

    @property
    def clean(self) -> bool:
        return not (self.changed or self.added)


def regenerate(
    refs_dir: Path = DEFAULT_REFS_DIR,
    names: list[str] | None = None,
    check: bool = False,
    on_start: Callable[[str], None] = lambda name: None,
) -> RefsReport:
    """Run the generators into a scratch folder, compare with refs_dir, and (unless check)
    copy over what differs. A bundle whose bytes differ but whose tensors agree to float
    rounding (compare.py: torch's CPU kernels round by the machine's instruction set) counts
    as unchanged and is not rewritten, so refs/ does not churn between machines. Generators
    never write into refs_dir directly, so a failing generator leaves the committed bundles
    untouched."""
    names = list(GENERATORS) if not names else names
    unknown = [n for n in names if n not in GENERATORS]
    if unknown:
        raise ValueError(f"unknown generator(s) {', '.join(unknown)}; known: {', '.join(GENERATORS)}")
    report = RefsReport()
    with tempfile.TemporaryDirectory(prefix="kdtree-refs-") as tmp:
        scratch = Path(tmp)
        produced: list[Path] = []
        for name in names:
            on_start(name)
            produced += load_generator(name)(scratch)
        for path in sorted(produced):
            rel = path.relative_to(scratch)
            target = refs_dir / rel
            if not target.exists():
                report.added.append(str(rel))
            elif filecmp.cmp(path, target, shallow=False):
                report.unchanged.append(str(rel))
                continue
            elif not (why := bundle_differences(target, path)):
                report.rounding.append(str(rel))
                continue
            else:
                report.changed.append(str(rel))
                report.why[str(rel)] = why
            if not check:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
    return report
