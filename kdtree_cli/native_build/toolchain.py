"""Find the tools a native build needs: nvcc and the CUDA toolkit, cuBLAS, the host C++
compiler and ninja. Each miss raises a KdtreeError that says what was missing, every place
that was looked at, and how to fix it.

CUDA toolkit, first match wins: --cuda-home, $CUDA_HOME, $CUDA_PATH, nvcc on PATH,
/usr/local/cuda, /opt/cuda. cuBLAS: the toolkit's own, else the `nvidia-cublas` wheel
installed in this Python (pip wheels ship libcublas.so.N without the dev symlink, so we
link the versioned file by its path and add an rpath to its directory).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from python_engine.errors import KdtreeError

WELL_KNOWN_CUDA_HOMES = ("/usr/local/cuda", "/opt/cuda")
CUBLAS_WHEELS = ("nvidia-cublas", "nvidia-cublas-cu13", "nvidia-cublas-cu12")
# nvcc answers --version in milliseconds; a hung one (broken NFS mount) should not hang us.
TOOL_QUERY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class CudaToolkit:
    home: Path
    nvcc: Path
    include_dirs: tuple[Path, ...]
    lib_dirs: tuple[Path, ...]
    version: tuple[int, int]
    supported_sm: tuple[int, ...]  # what `nvcc --list-gpu-code` offers (90, 100, 120, ...)
    found_by: str
    skipped: tuple[str, ...] = ()  # earlier candidates that were not usable, and why

    @property
    def version_str(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"


@dataclass(frozen=True)
class Cublas:
    include_dir: Path
    library: Path  # the libcublas shared object we link by path
    found_by: str

    @property
    def lib_dir(self) -> Path:
        return self.library.parent


@dataclass(frozen=True)
class Nccl:
    """NCCL for a model split over GPUs: its header at build time; the engine opens the
    library itself at run time (so a one-GPU engine never needs it)."""
    include_dir: Path
    library: Path | None  # libnccl.so.2 next to the header, the engine's first guess
    found_by: str


@dataclass(frozen=True)
class Toolchain:
    cuda: CudaToolkit
    cublas: Cublas
    cxx: str  # host C++ compiler (also nvcc's -ccbin)
    ninja: str
    nccl: Nccl | None = None  # optional: without it the engine runs on one GPU only


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TOOL_QUERY_TIMEOUT_S)


def _header_dirs(home: Path) -> list[Path]:
    """Where a toolkit keeps cuda_runtime.h: include/, or targets/<triple>/include/."""
    dirs = [home / "include"] + sorted((home / "targets").glob("*/include"))
    return _unique([d for d in dirs if (d / "cuda_runtime.h").is_file()])


def _unique(dirs: list[Path]) -> list[Path]:
    """Drop directories that are the same place as an earlier one (include -> targets/.../include)."""
    seen, out = set(), []
    for d in dirs:
        if d.resolve() not in seen:
            seen.add(d.resolve())
            out.append(d)
    return out


def _lib_dirs(home: Path) -> list[Path]:
    dirs = [home / "lib64", home / "lib"] + sorted((home / "targets").glob("*/lib"))
    return _unique([d for d in dirs if d.is_dir()])


def _home_from_nvcc_dryrun(nvcc: str) -> Path | None:
    """Ask nvcc where it lives: wrapper scripts (/usr/local/bin/nvcc -> exec .../bin/nvcc)
    hide the real toolkit from the path alone. nvcc prints `#$ TOP=<home>` on --dryrun."""
    try:
        out = _run([nvcc, "--dryrun", "-E", "-x", "cu", os.devnull])
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in (out.stdout + out.stderr).splitlines():
        if line.startswith("#$ TOP="):
            return Path(line.split("=", 1)[1].strip()).resolve()
    return None


def _toolkit_at(home: Path, found_by: str, looked: list[str]) -> CudaToolkit | None:
    nvcc = home / "bin" / "nvcc"
    if not nvcc.is_file():
        looked.append(f"{home} ({found_by}): no bin/nvcc")
        return None
    headers = _header_dirs(home)
    if not headers:
        looked.append(f"{home} ({found_by}): nvcc but no include/cuda_runtime.h")
        return None
    try:
        version_out = _run([str(nvcc), "--version"]).stdout
        codes_out = _run([str(nvcc), "--list-gpu-code"]).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        looked.append(f"{home} ({found_by}): {nvcc} does not run: {exc}")
        return None
    match = re.search(r"release (\d+)\.(\d+)", version_out)
    if not match:
        looked.append(f"{home} ({found_by}): `{nvcc} --version` printed no release number")
        return None
    supported = tuple(sorted({int(m) for m in re.findall(r"sm_(\d+)", codes_out)}))
    return CudaToolkit(
        home=home,
        nvcc=nvcc,
        include_dirs=tuple(headers),
        lib_dirs=tuple(_lib_dirs(home)),
        version=(int(match.group(1)), int(match.group(2))),
        supported_sm=supported,
        found_by=found_by,
    )


def find_cuda(cuda_home: str | None = None, env: Mapping[str, str] | None = None) -> CudaToolkit:
    env = os.environ if env is None else env
    looked: list[str] = []
    if cuda_home:
        toolkit = _toolkit_at(Path(cuda_home).expanduser().resolve(), "--cuda-home", looked)
        if toolkit is None:
            raise KdtreeError(
                f"--cuda-home {cuda_home} is not a CUDA toolkit: {looked[-1]}. "
                "Point it at the directory that holds bin/nvcc and include/cuda_runtime.h."
            )
        return toolkit
    candidates: list[tuple[Path, str]] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(var):
            candidates.append((Path(env[var]).expanduser(), f"${var}"))
    nvcc_on_path = shutil.which("nvcc", path=env.get("PATH"))
    if nvcc_on_path:
        real = Path(nvcc_on_path).resolve()
        home = real.parent.parent
        if not _header_dirs(home):
            home = _home_from_nvcc_dryrun(nvcc_on_path) or home
        candidates.append((home, f"nvcc on PATH ({nvcc_on_path})"))
    else:
        looked.append("PATH: no nvcc")
    candidates += [(Path(p), "well-known location") for p in WELL_KNOWN_CUDA_HOMES]
    for home, found_by in candidates:
        toolkit = _toolkit_at(home.resolve() if home.exists() else home, found_by, looked)
        if toolkit is not None:
            return replace(toolkit, skipped=tuple(looked))
    raise KdtreeError(
        "nvcc (the CUDA toolkit) not found. Looked at: "
        + "; ".join(looked)
        + ". Fix: install the CUDA toolkit (13.x), then pass --cuda-home DIR, set CUDA_HOME=DIR, "
        "or put DIR/bin on PATH (DIR holds bin/nvcc and include/cuda_runtime.h)."
    )


def _soname_major(library: Path) -> int | None:
    match = re.search(r"\.so\.(\d+)", library.name)
    return int(match.group(1)) if match else None


def _cublas_in_toolkit(cuda: CudaToolkit) -> Cublas | None:
    header = next((d for d in cuda.include_dirs if (d / "cublas_v2.h").is_file()), None)
    if header is None:
        return None
    for lib_dir in cuda.lib_dirs:
        for name in ("libcublas.so", f"libcublas.so.{cuda.version[0]}"):
            if (lib_dir / name).exists():
                return Cublas(header, lib_dir / name, f"CUDA toolkit ({cuda.home})")
    return None


def _installed_wheels(names: tuple[str, ...]):
    """(name, distribution, its files) of each of `names` installed in this Python."""
    for dist_name in names:
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            continue
        yield dist_name, dist, [Path(str(dist.locate_file(f))) for f in (dist.files or [])]


def _cublas_in_wheels(cuda: CudaToolkit, looked: list[str]) -> Cublas | None:
    for dist_name, dist, files in _installed_wheels(CUBLAS_WHEELS):
        headers = [f.parent for f in files if f.name == "cublas_v2.h"]
        libs = [f for f in files if f.name.startswith("libcublas.so")]
        if not headers or not libs:
            looked.append(f"wheel {dist_name} {dist.version}: no cublas_v2.h or libcublas.so")
            continue
        library = libs[0]
        if _soname_major(library) not in (None, cuda.version[0]):
            looked.append(
                f"wheel {dist_name} {dist.version}: {library.name} does not match nvcc {cuda.version_str}"
            )
            continue
        return Cublas(headers[0], library, f"wheel {dist_name} {dist.version}")
    return None


def find_cublas(cuda: CudaToolkit) -> Cublas:
    found = _cublas_in_toolkit(cuda)
    if found is not None:
        return found
    looked = [
        "toolkit: "
        + ", ".join(str(d) for d in cuda.include_dirs + cuda.lib_dirs)
        + " (no cublas_v2.h + libcublas.so)"
    ]
    found = _cublas_in_wheels(cuda, looked)
    if found is not None:
        return found
    looked.append(f"wheels {', '.join(CUBLAS_WHEELS)} in {sys.executable}: not installed or unusable")
    major, minor = cuda.version
    raise KdtreeError(
        "cuBLAS not found. Looked at: "
        + "; ".join(looked)
        + f". Fix: install the toolkit's cuBLAS (e.g. `apt install libcublas-dev-{major}-{minor}`) "
        f"or the wheel into this Python: `{sys.executable} -m pip install 'nvidia-cublas=={major}.{minor}.*'`."
    )


NCCL_WHEELS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12")


def find_nccl(cuda: CudaToolkit) -> Nccl | None:
    """nccl.h in the toolkit (or the system's include dir), else an nvidia-nccl wheel in this Python."""
    system = [Path("/usr/include"), *sorted(Path("/usr/lib").glob("*-linux-gnu"))]
    for inc in [*cuda.include_dirs, Path("/usr/include")]:
        if (inc / "nccl.h").is_file():
            libs = [d / "libnccl.so.2" for d in [*cuda.lib_dirs, *system] if (d / "libnccl.so.2").is_file()]
            return Nccl(inc, libs[0] if libs else None, f"{inc}")
    for dist_name, dist, files in _installed_wheels(NCCL_WHEELS):
        headers = [f.parent for f in files if f.name == "nccl.h"]
        libs = [f for f in files if f.name == "libnccl.so.2"]
        if headers:
            return Nccl(headers[0], libs[0] if libs else None, f"wheel {dist_name} {dist.version}")
    return None


def find_cxx(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    names = [env["CXX"]] if env.get("CXX") else ["g++", "c++"]
    for name in names:
        found = shutil.which(name, path=env.get("PATH"))
        if found:
            return found
    raise KdtreeError(
        f"no host C++ compiler: looked for {', '.join(names)} on PATH. "
        "Fix: install g++ (nvcc needs it too), or set CXX to a compiler nvcc supports."
    )


def _ninja_candidates() -> list[Path]:
    """Where a ninja binary may be, best first: the `ninja` package's BIN_DIR (PyPI wheels),
    its data folder, the bin/ of the environment that holds the package (a venv seen through
    another venv: the per-release environments of `kdtree deploy` on a host whose Python is
    itself a venv), the bin/ of this interpreter's environment, then PATH."""
    out: list[Path] = []
    try:
        import ninja

        bin_dir = getattr(ninja, "BIN_DIR", "")
        if bin_dir:
            out.append(Path(bin_dir) / "ninja")
        pkg = Path(getattr(ninja, "__file__", "") or ".").parent
        out.append(pkg / "data" / "bin" / "ninja")
        # site-packages/ninja -> <env>/lib/pythonX.Y/site-packages -> <env>/bin/ninja
        out.append(pkg.parent.parent.parent.parent / "bin" / "ninja")
    except ImportError:
        pass
    out += [Path(sys.executable).parent / "ninja", Path(sys.prefix) / "bin" / "ninja",
            Path(sys.base_prefix) / "bin" / "ninja"]
    on_path = shutil.which("ninja")
    if on_path:
        out.append(Path(on_path))
    return out


def find_ninja() -> str:
    looked = []
    for candidate in _ninja_candidates():
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
        looked.append(str(candidate))
    raise KdtreeError(
        f"ninja not found (looked at: {', '.join(dict.fromkeys(looked)) or 'nothing'}; and PATH). "
        f"Fix: `{sys.executable} -m pip install ninja`."
    )


def find_toolchain(cuda_home: str | None = None, env: Mapping[str, str] | None = None) -> Toolchain:
    cuda = find_cuda(cuda_home, env)
    return Toolchain(cuda=cuda, cublas=find_cublas(cuda), cxx=find_cxx(env), ninja=find_ninja(), nccl=find_nccl(cuda))
