"""CUDA target architectures: parse `--arch` specs, detect the visible GPUs, pick the targets.

Each target becomes one explicit `-gencode=arch=compute_X,code=sm_X` (SASS only, no PTX):
the build must run on exactly the GPUs it was made for, and an arch-specific target such as
`90a` (Hopper-only instructions: wgmma, setmaxnreg) has no forward-compatible PTX anyway.
Note that sm_120 (RTX PRO 6000 Blackwell) is not a superset of sm_100 (B200): a build for
"any Blackwell" needs both.

Where the targets come from, first match wins:
  `--arch` > `KDTREE_CUDA_ARCH` > the deploy host's profile > the visible GPUs > the default.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from python_engine.errors import KdtreeError

ARCH_ENV_VAR = "KDTREE_CUDA_ARCH"

# Named targets. Hopper maps to 90a because the engine's Hopper kernels use Hopper-only
# instructions; the plain numbers stay available for anyone who wants plain sm_90.
ARCH_NAMES: dict[str, tuple[str, ...]] = {
    "hopper": ("90a",),
    "h100": ("90a",),
    "h200": ("90a",),
    "h800": ("90a",),
    "gh200": ("90a",),
    "b200": ("100",),
    "gb200": ("100",),
    "blackwell-dc": ("100",),
    "rtx-pro-6000": ("120",),
    "rtx-pro": ("120",),
    "rtx5090": ("120",),
    "blackwell-rtx": ("120",),
    # "blackwell" alone names two incompatible families (B200 is sm_100, the RTX PRO 6000
    # is sm_120); build both so the result runs on any Blackwell GPU.
    "blackwell": ("100", "120"),
    "all": ("90a", "100", "120"),
}

# With no GPU visible and nothing asked for: the two machines this project targets,
# the H200 test GPU (sm_90a) and the RTX PRO 6000 Blackwell box (sm_120).
DEFAULT_ARCHS: tuple[str, ...] = ("90a", "120")

# Arch-specific ("a") targets exist from Hopper on; family ("f") targets from sm_100 on.
MIN_ARCH_SPECIFIC = 90
MIN_FAMILY_SPECIFIC = 100
# Oldest architecture nvcc 12/13 still compiles for (Turing, sm_75); anything older is a typo.
MIN_ARCH_NUMBER = 75

# Seconds to wait for nvidia-smi: it can hang on a wedged driver, and then we fall back.
NVIDIA_SMI_TIMEOUT_S = 10.0

_NUMBER_RE = re.compile(r"^(\d{2,3})([af]?)$")
_DOTTED_RE = re.compile(r"^(\d{1,2})\.(\d)([af]?)$")


@dataclass(frozen=True, order=True)
class CudaArch:
    """One compile target: `number` is major*10+minor (90, 100, 120); `suffix` is '', 'a' or 'f'."""

    number: int
    suffix: str = ""

    @property
    def name(self) -> str:
        return f"{self.number}{self.suffix}"

    @property
    def gencode(self) -> str:
        return f"-gencode=arch=compute_{self.name},code=sm_{self.name}"

    @property
    def sm(self) -> str:
        return f"sm_{self.name}"

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class ArchChoice:
    """The targets to build and a few words on where they came from (shown to the user)."""

    archs: tuple[CudaArch, ...]
    source: str

    @property
    def names(self) -> str:
        return ",".join(a.name for a in self.archs)


def _known_names_hint() -> str:
    return "numbers like 90a or 120 (also sm_90a, 9.0), or names: " + ", ".join(ARCH_NAMES)


def _parse_token(token: str) -> list[CudaArch]:
    raw = token
    token = token.strip().lower()
    if token in ARCH_NAMES:
        return [_parse_token(t)[0] for t in ARCH_NAMES[token]]
    for prefix in ("compute_", "sm_", "sm"):
        if token.startswith(prefix):
            token = token[len(prefix) :]
            break
    match = _NUMBER_RE.match(token)
    if match:
        number, suffix = int(match.group(1)), match.group(2)
    else:
        dotted = _DOTTED_RE.match(token)
        if not dotted:
            raise KdtreeError(f"unknown CUDA architecture {raw!r}: use {_known_names_hint()}")
        number = int(dotted.group(1)) * 10 + int(dotted.group(2))
        suffix = dotted.group(3)
    if number < MIN_ARCH_NUMBER:
        raise KdtreeError(
            f"CUDA architecture {raw!r} is older than sm_{MIN_ARCH_NUMBER}, the oldest nvcc supports"
        )
    if suffix == "a" and number < MIN_ARCH_SPECIFIC:
        raise KdtreeError(f"CUDA architecture {raw!r}: 'a' targets exist from sm_{MIN_ARCH_SPECIFIC} on")
    if suffix == "f" and number < MIN_FAMILY_SPECIFIC:
        raise KdtreeError(f"CUDA architecture {raw!r}: 'f' targets exist from sm_{MIN_FAMILY_SPECIFIC} on")
    return [CudaArch(number, suffix)]


def parse_arch_spec(spec: str) -> tuple[CudaArch, ...]:
    """Parse '90a,120', 'hopper blackwell', 'sm_90a;h200' into sorted, de-duplicated targets."""
    tokens = [t for t in re.split(r"[,;\s]+", spec) if t]
    if not tokens:
        raise KdtreeError(f"empty CUDA architecture list {spec!r}: use {_known_names_hint()}")
    archs: set[CudaArch] = set()
    for token in tokens:
        archs.update(_parse_token(token))
    return tuple(sorted(archs))


def arch_for_compute_cap(cap: str) -> CudaArch:
    """Map nvidia-smi's compute_cap ('9.0', '12.0') to the target this project builds for it."""
    match = re.match(r"^\s*(\d+)\.(\d+)\s*$", cap)
    if not match:
        raise ValueError(f"not a compute capability: {cap!r}")
    number = int(match.group(1)) * 10 + int(match.group(2))
    # Hopper gets its arch-specific target: the kernels use Hopper-only instructions.
    return CudaArch(number, "a" if number == MIN_ARCH_SPECIFIC else "")


def detect_gpu_archs(env: Mapping[str, str] | None = None) -> tuple[CudaArch, ...]:
    """Targets of the GPUs nvidia-smi reports (honouring CUDA_VISIBLE_DEVICES); () when none."""
    env = os.environ if env is None else env
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ()
    cmd = [smi, "--query-gpu=compute_cap", "--format=csv,noheader"]
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [v.strip() for v in visible.split(",") if v.strip()]
        if not ids or any(v.startswith("-") for v in ids):
            return ()  # CUDA hides every GPU (empty list, or a negative id ends the list at once)
        cmd.append("--id=" + ",".join(ids))
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    if out.returncode != 0:
        return ()
    archs = set()
    for line in out.stdout.splitlines():
        try:
            archs.add(arch_for_compute_cap(line))
        except ValueError:
            continue
    return tuple(sorted(archs))


def resolve_archs(
    cli_arch: str | None = None,
    *,
    host_profile_arch: str | Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    detect: Callable[[], Sequence[CudaArch]] | None = None,
) -> ArchChoice:
    """Pick the targets: --arch, then $KDTREE_CUDA_ARCH, then the host profile, then the
    visible GPUs, then DEFAULT_ARCHS. `cli_arch` 'auto' (or 'native') skips to detection."""
    env = os.environ if env is None else env
    detect = detect if detect is not None else (lambda: detect_gpu_archs(env))
    auto = cli_arch is not None and cli_arch.strip().lower() in ("auto", "native")
    if cli_arch is not None and not auto:
        return ArchChoice(parse_arch_spec(cli_arch), "--arch")
    if not auto:
        env_spec = env.get(ARCH_ENV_VAR, "").strip()
        if env_spec:
            return ArchChoice(parse_arch_spec(env_spec), ARCH_ENV_VAR)
        if host_profile_arch:
            spec = host_profile_arch if isinstance(host_profile_arch, str) else ",".join(host_profile_arch)
            return ArchChoice(parse_arch_spec(spec), "host profile")
    detected = tuple(detect())
    if detected:
        return ArchChoice(detected, "visible GPUs")
    return ArchChoice(parse_arch_spec(",".join(DEFAULT_ARCHS)), "default: no GPU visible")


def check_archs_supported(archs: Sequence[CudaArch], supported_sm: Sequence[int], nvcc: str) -> None:
    """Fail early, with the list nvcc offers, when nvcc cannot compile for a requested target."""
    missing = [a for a in archs if a.number not in supported_sm]
    if missing and supported_sm:
        have = ", ".join(str(n) for n in sorted(supported_sm))
        raise KdtreeError(
            f"{nvcc} cannot compile for {', '.join(a.sm for a in missing)}; it supports: {have}. "
            f"Pick others with --arch or {ARCH_ENV_VAR}, or use a newer CUDA toolkit (--cuda-home)."
        )
