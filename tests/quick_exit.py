"""Ending a pytest process within pytest-xdist's grace time.

After the last test, pytest's cleanup runs five full garbage collections (to report
exceptions raised in __del__). In a process that imported torch, transformers and textual
(400k objects) each takes 1.3 s on the loaded 2-core CI box. An xdist worker still busy
5 s after the controller says it is done gets a SIGINT from execnet, and the resulting
KeyboardInterrupt lands in whatever runs, usually hypothesis's gc callback: a traceback
after the summary. So: one collection while pytest still records what it finds, then
gc.freeze(), which leaves the five nothing to walk. tests/conftest.py loads this hook."""

from __future__ import annotations

import gc


def pytest_unconfigure(config) -> None:
    gc.collect()
    gc.freeze()
