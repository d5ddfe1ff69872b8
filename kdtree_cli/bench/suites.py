"""The cases of `kdtree bench kernels`: the sweeps and their quick variants.

Each case is a frozen dataclass; `native_line()` is the line bench_kernels reads
(csrc/bench/bench_kernels.cu) and `key()` joins its native record with its baselines.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

SUITES = ("ceilings", "attn", "topk", "tree", "accept")  # what `all` (and no --suite) runs
# Suites run only when named: kimi-rank, Kimi K2.6's attention per rank of 8 GPUs (with the
# ceilings its roofline needs)
EXTRA_SUITES = ("kimi-rank",)

# Kimi K2.6 on 8 GPUs: 64 heads split 8 ways; the verify query tokens T (a tree of T - 1 nodes
# below the root: 1 is plain decode), the prefixes and the batches of a rank
KIMI_RANK_HEADS = 8
KIMI_RANK_QUERY_TOKENS = (1, 2, 9, 17, 33, 65)
KIMI_RANK_PREFIXES = (1024, 8192, 32768, 131072)
KIMI_RANK_BATCHES = (1, 8)


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
class KimiAttnCase(AttnCase):
    """An attention case of the kimi-rank suite: the same native case, its own table (the
    roofline and the vLLM anchor beside it)."""

    @property
    def query_tokens(self) -> int:
        return self.n + 1


@dataclass(frozen=True)
class MmaCase(Case):
    """The mma.sync rate: bf16 m16n8k16 MMAs with f32 accumulation from registers on every SM
    (csrc/bench/bench_kernels.cu): the compute ceiling of the kernels that use mma.sync (the
    sm_120 plan), where cuBLAS's rate is wgmma's on an H100/H200."""

    blocks_per_sm: int = 4
    suite = "mma"


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
        out += [GemmCase(8192, 8192, 8192), GemmCase(4160, 32768, 576), CopyCase(), MmaCase(), LaunchCase(0),
                LaunchCase(200)]
    if "attn" in suites:
        heads, ns = (8, 64), ((1, 64) if quick else (1, 16, 64, 256))
        prefixes = (32768,) if quick else (1024, 8192, 32768, 131072)
        out += [AttnCase(h, n, p) for h in heads for n in ns for p in prefixes]
        if quick:
            out.append(AttnCase(64, 64, 131072))
    if "kimi-rank" in suites:
        if "ceilings" not in suites:  # its roofline: copy bandwidth and the mma.sync rate of this run
            out += [CopyCase(), MmaCase()]
        prefixes = (8192, 131072) if quick else KIMI_RANK_PREFIXES
        tokens = (1, 2, 17, 65) if quick else KIMI_RANK_QUERY_TOKENS
        out += [KimiAttnCase(KIMI_RANK_HEADS, t - 1, p, b) for b in KIMI_RANK_BATCHES for t in tokens
                for p in prefixes]
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
    """'attn,tree' -> ('attn', 'tree'); None or 'all' -> SUITES (kimi-rank only when named).
    Unknown names raise."""
    from python_engine.errors import KdtreeError

    if not spec or spec == "all":
        return SUITES
    names = tuple(s.strip() for s in spec.split(",") if s.strip())
    known = SUITES + EXTRA_SUITES
    unknown = [n for n in names if n not in known]
    if unknown:
        raise KdtreeError(f"unknown bench suite(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return names
