"""Per-GPU figures for the metrics events' optional `gpus` field (docs/events.md), read through
NVML (the nvidia-ml-py package), at most once a second. Without NVML (no driver, no GPU, the
package missing) there is nothing to report and the field is left out."""

from __future__ import annotations

import time

MIN_PERIOD_S = 1.0  # NVML reads cost ~100 us per device; once a second is what the panel shows
GB = 1e9


class GpuSampler:
    def __init__(self, devices: list[int] | None = None):
        self._handles = []
        self._last = 0.0
        try:
            import pynvml

            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            for i in devices if devices is not None else range(count):
                if 0 <= i < count:
                    self._handles.append((i, pynvml.nvmlDeviceGetHandleByIndex(i)))
            self._nvml = pynvml
        except Exception:  # no NVML here: the runs go on without GPU figures
            self._handles = []

    @property
    def available(self) -> bool:
        return bool(self._handles)

    def sample(self, force: bool = False) -> list[dict] | None:
        """[{id, util, mem_gb, mem_total_gb, power_w}] or None (too soon, or no NVML)."""
        now = time.monotonic()
        if not self._handles or (not force and now - self._last < MIN_PERIOD_S):
            return None
        self._last = now
        out = []
        for i, h in self._handles:
            try:
                util = self._nvml.nvmlDeviceGetUtilizationRates(h).gpu
                mem = self._nvml.nvmlDeviceGetMemoryInfo(h)
                entry = {"id": i, "util": float(util), "mem_gb": round(mem.used / GB, 3),
                         "mem_total_gb": round(mem.total / GB, 3)}
                try:
                    entry["power_w"] = round(self._nvml.nvmlDeviceGetPowerUsage(h) / 1000.0, 1)
                except Exception:
                    pass  # some boards do not report power
                out.append(entry)
            except Exception:
                continue
        return out or None
