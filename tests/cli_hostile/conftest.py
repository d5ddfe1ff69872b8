"""The CLI cases run `kdtree run` / `demo` in-process, which set torch's thread count
(--threads, default 1): restore it after each test, as the model and decode folders do."""

from __future__ import annotations

from torch_threads import single_thread  # noqa: F401 (autouse fixture for this folder)
