"""The cases of `kdtree bench kernels`: the sweeps and their quick variants.

Each case is a frozen dataclass; `native_line()` is the line bench_kernels reads
(csrc/bench/bench_kernels.cu) and `key()` joins its native record with its baselines.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

SUITES = ("ceilings", "attn", "topk", "tree", "accept")


@dataclass(frozen=True)
class Case:
    suite = ""  # set by each subclass

    def params(self) -> dict:
        return asdict(self)

    def native_line(self) -> str:
        return " ".join([self.native_suite] + [f"{f.name}={getattr(self, f.name)}" for f in fields(self)])

    def key(self) -> tuple:
        return (self.native_suite, *(str(getattr(self, f.name)) for f in fields(self)))

    @property
    def native_suite(self) -> str:
        return self.suite


@dataclass(frozen=True)
class GemmCase(Case):
    m: int
    n: int
    k: int
    suite = "gemm"


@dataclass(frozen=True)
class CopyCase(Case):
    mb: int = 1024
    suite = "copy"


@dataclass(frozen=True)
class LaunchCase(Case):
    smem_kb: int = 0  # dynamic shared memory a block
    blocks: int = 0   # 0: one a SM
    suite = "launch"


@dataclass(frozen=True)
class AttnCase(Case):
    heads: int
    n: int          # tree nodes; T = n + 1 query tokens
    prefix: int     # cache rows before the tree
    batch: int = 1
    dtype: str = "bf16"
    suite = "verify_attn"

    @property
    def flops(self) -> float:  # 2 H T L (576 + 512): QK^T over the latent+rope dims, PV over the latent
        return 2.0 * self.batch * self.heads * (self.n + 1) * self.prefix * (576 + 512)

    @property
    def cache_bytes(self) -> float:  # the prefix's latent rows, read once
        return float(self.batch) * self.prefix * 576 * (2 if self.dtype == "bf16" else 4)


@dataclass(frozen=True)
class TopkCase(Case):
    rows: int
    vocab: int
    k: int
    suite = "topk"


@dataclass(frozen=True)
class TreeCase(Case):
    batch: int
    budget: int
    depth: int = 15
    input: str = "flat"  # flat: sorted rows with exponential gaps; logits: top-K of normal(0, 2.5) logits
    suite = "tree_build"


@dataclass(frozen=True)
class AcceptCase(Case):
    batch: int
    budget: int
    suite = "accept"


@dataclass(frozen=True)
class CompactCase(Case):
    batch: int
    layers: int = 61
    suite = "compact"


def sweep(suites: tuple[str, ...] = SUITES, quick: bool = False) -> list[Case]:
    """The cases to run, in order. quick: a few representative ones per suite."""
    out: list[Case] = []
    if "ceilings" in suites:
        # the launch floor: an empty kernel timed as every case is, plain and with the shared
        # memory of the large-tile kernels (the SM's split between L1 and shared memory changes)
        out += [GemmCase(8192, 8192, 8192), GemmCase(4160, 32768, 576), CopyCase(), LaunchCase(0), LaunchCase(200)]
    if "attn" in suites:
        heads, ns = (8, 64), ((1, 64) if quick else (1, 16, 64, 256))
        prefixes = (32768,) if quick else (1024, 8192, 32768, 131072)
        out += [AttnCase(h, n, p) for h in heads for n in ns for p in prefixes]
        if quick:
            out.append(AttnCase(64, 64, 131072))
    if "topk" in suites:
        out.append(TopkCase(448, 163840, 256))
        if not quick:
            out += [TopkCase(448, 163840, 1024), TopkCase(64, 163840, 256), TopkCase(448, 32768, 256)]
    if "tree" in suites:
        batches, budgets = ((1, 64), (256,)) if quick else ((1, 8, 64, 256), (16, 64, 256, 1024))
        out += [TreeCase(b, n, 15, i) for i in ("flat", "logits") for n in budgets for b in batches]
    if "accept" in suites:
        out += [AcceptCase(b, 256) for b in (1, 64)] + [CompactCase(b) for b in (1, 64)]
    return out


def parse_suites(spec: str | None) -> tuple[str, ...]:
    """'attn,tree' -> ('attn', 'tree'); None or 'all' -> every suite. Unknown names raise."""
    from python_engine.errors import KdtreeError

    if not spec or spec == "all":
        return SUITES
    names = tuple(s.strip() for s in spec.split(",") if s.strip())
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        raise KdtreeError(f"unknown bench suite(s) {', '.join(unknown)}; known: {', '.join(SUITES)}")
    return names
