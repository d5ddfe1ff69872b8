"""Where a deploy's local files go: results/<host>/ changes only when a deploy succeeds.

A deploy writes its logs, the fetched reports and deploy.json into a work folder of its
own, <work root>/<host>-<UTC time>-<random>/ (default work root:
$XDG_STATE_HOME/kdtree/deploy, i.e. ~/.local/state/kdtree/deploy). On success that folder
replaces results/<host>/; on failure it stays where it is, and the error names it. So an
unreachable host, a failed build or a cut connection never wipes or half-fills
results/<host>/, and a failed first deploy leaves no results/<host>/ at all.

A results/<host>/ that a deploy did not write (no deploy.json at its top: a folder of
committed measurements that happens to share the host's name) is never replaced: the
deploy refuses before connecting and says to pick another --results folder.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from remote.errors import InventoryError

SUMMARY = "deploy.json"


def default_work_root() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(base) / "kdtree" / "deploy"


class ResultsFolder:
    def __init__(self, results_root: Path, host: str, work_root: Path | None = None):
        self.final = Path(results_root) / host
        self.work_root = Path(work_root or default_work_root())
        self.work: Path | None = None  # made by start()

    def start(self) -> Path:
        """Make this deploy's own work folder; returns it."""
        self.work_root.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        self.work = Path(tempfile.mkdtemp(prefix=f"{self.final.name}-{stamp}-", dir=self.work_root))
        return self.work

    def check_replaceable(self) -> None:
        """Refuse (before anything happens) to ever replace a folder a deploy did not write."""
        if self.final.exists() and any(self.final.iterdir()) and not (self.final / SUMMARY).is_file():
            raise InventoryError(
                f"{self.final} holds files that kdtree deploy did not write (no {SUMMARY}), and a "
                f"deploy replaces that folder: deploy with --results DIR (results land in "
                f"DIR/{self.final.name}/), or give the host another name"
            )

    def commit(self) -> Path:
        """Move the work folder into place as results/<host>/; returns that path."""
        self.final.parent.mkdir(parents=True, exist_ok=True)
        old = self.final.with_name(f".{self.final.name}.replaced-{self.work.name}")
        if self.final.exists():
            os.rename(self.final, old)
        try:
            shutil.move(str(self.work), str(self.final))  # a rename on one file system
        except BaseException:
            if old.exists() and not self.final.exists():
                os.rename(old, self.final)  # put the previous results back
            raise
        shutil.rmtree(old, ignore_errors=True)
        return self.final
