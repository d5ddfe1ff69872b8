"""The projected decoding round on one host: time per round and tokens per second per
budget, at a context length, from named inputs.

A round on each of N GPUs (the engine's split, docs/engine.md) is, one after the other
(nothing here overlaps):
- weights: the distinct routed experts the round's tokens pick, this rank's share (E/N
  experts a layer, so D/N of the D picked, the mean rank), read at the device's copy
  bandwidth times the W4A16 kernel's measured time over its byte floor; every other target
  weight of this rank once (or its GEMM time, if longer);
- attention: verify_attn at this rank's heads, the round's rows and the context, from the
  H200's measured times scaled by the spec ratio of whatever bounds that shape (bandwidth
  or tensor rate);
- collectives: two all-reduces a layer of rows x hidden bf16, plus the gathers of the
  merged argmax and top-K;
- the drafter (DDTree only): all its weights, the lm_head slice again for its rows, its
  K/V cache over the context;
- the round's machinery (top-K, tree build, commit, host), as measured on the H200.
tokens/s = slots x tau / round; tau per budget from an acceptance input.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from python_engine.device_profiles import PROFILES, DeviceProfile
from python_engine.errors import KdtreeError
from python_engine.model.config import TargetConfig
from python_engine.model.drafter_config import DrafterConfig
from python_engine.plan import inputs as M
from python_engine.plan.weights import DTYPE_BYTES, WeightParts

ZLAB_ACCEPTANCE = 5.3  # z-lab/Kimi-K2.5-DFlash model card: accept length at block 8, HumanEval and GSM8K (SGLang)
ZLAB_SOURCE = "z-lab/Kimi-K2.5-DFlash model card: acceptance length 5.3 at block size 8 (HumanEval, GSM8K; SGLang)"
RATIO_NOISE = 1.05  # a measured distinct / random ratio may pass 1 by sampling noise, not by more
P2P_OFF_SHARE = 0.5  # with peer-to-peer off NCCL stages every transfer through host memory: two PCIe crossings


@dataclass(frozen=True)
class Input:
    name: str
    value: float
    unit: str
    kind: str  # measured | spec | projection | assumption | user
    source: str


def interpolate(points: dict[float, float], x: float, log: bool = False) -> float:
    """Piecewise-linear through `points` (in log2 x when `log`), held flat past both ends."""
    xs = sorted(points)
    if x <= xs[0]:
        return points[xs[0]]
    if x >= xs[-1]:
        return points[xs[-1]]
    f = (lambda v: math.log2(v)) if log else (lambda v: v)
    for a, b in zip(xs, xs[1:]):
        if a <= x <= b:
            t = (f(x) - f(a)) / (f(b) - f(a))
            return points[a] + t * (points[b] - points[a])
    raise AssertionError("unreachable")


def random_distinct_experts(experts: int, top_k: int, tokens: int) -> float:
    """Expected distinct experts `tokens` tokens pick in one layer under uniform random routing."""
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


@dataclass(frozen=True)
class RoutingSharing:
    """Distinct experts a round's tokens read, as a share of the random-routing expectation."""

    ratio_by_tokens: dict[int, float] = field(default_factory=lambda: {1: 1.0})
    source: str = "random routing: E (1 - (1 - k/E)^T) distinct experts a layer (no sharing measured)"
    kind: str = "assumption"

    def ratio(self, tokens: int) -> float:
        return interpolate({float(k): v for k, v in self.ratio_by_tokens.items()}, tokens)

    @classmethod
    def from_file(cls, path: str | Path) -> "RoutingSharing":
        """A measured ratio file: `kdtree bench routing`'s routing.json ("ratio_by_T": {T: [...],
        ratio: [...], measured_on}, "run": {commit}), or an object "ratio_by_tokens" {T: ratio}
        with optional "source" and "commit"."""
        p = Path(path)
        try:
            raw = json.loads(p.read_text())
        except (OSError, ValueError) as exc:
            raise KdtreeError(f"routing file {p}: cannot read it as JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise KdtreeError(f"routing file {p}: must hold a JSON object")
        bench = raw.get("ratio_by_T")
        try:
            if isinstance(bench, dict):
                ratios = {int(t): float(r) for t, r in zip(bench["T"], bench["ratio"], strict=True)}
                where = bench.get("measured_on", "")
                commit = (raw.get("run") or {}).get("commit", "")
            elif isinstance(raw.get("ratio_by_tokens"), dict):
                ratios = {int(k): float(v) for k, v in raw["ratio_by_tokens"].items()}
                where, commit = raw.get("source", ""), raw.get("commit", "")
            else:
                raise KeyError("ratio_by_T")
        except (KeyError, TypeError, ValueError):
            raise KdtreeError(f"routing file {p}: needs \"ratio_by_T\" (T and ratio lists, as `kdtree bench "
                              f"routing` writes) or \"ratio_by_tokens\" {{T: ratio}}") from None
        bad = [k for k, v in ratios.items() if k < 1 or not 0 < v <= RATIO_NOISE]
        if not ratios or bad:
            raise KdtreeError(f"routing file {p}: token counts >= 1 and ratios in (0, {RATIO_NOISE}] only "
                              f"(bad: T = {bad[:3]})")
        return cls(ratios, f"{p}" + (f" (commit {commit})" if commit else "") + (f": measured on {where}" if where else ""),
                   "measured")


def demo_tau(budget: int) -> float:
    """The demo pair's measured tau at `budget` (log-linear between the measured budgets;
    below 8, the 8 -> 16 slope extended)."""
    table = M.DEMO_TAU_BY_BUDGET
    if budget < min(table):
        slope = table[16] - table[8]  # tau per doubling of the budget
        return table[8] - slope * math.log2(8 / budget)
    return interpolate({float(k): v for k, v in table.items()}, budget, log=True)


@dataclass(frozen=True)
class Acceptance:
    """tau (tokens a round emits, the bonus included) per budget."""

    at_budget_8: float = ZLAB_ACCEPTANCE
    source: str = ZLAB_SOURCE
    overrides: dict[int, float] = field(default_factory=dict)

    def tau(self, budget: int, block_size: int) -> float:
        if budget == 0:
            return 1.0
        if budget in self.overrides:
            return self.overrides[budget]
        return min(float(block_size), self.at_budget_8 * demo_tau(budget) / demo_tau(8))


@dataclass(frozen=True)
class Host:
    profile: DeviceProfile
    gpus: int
    interconnect: str  # nvlink | pcie
    p2p: bool = True
    memory_limit: float | None = None  # bytes; None: the profile's memory


@dataclass(frozen=True)
class RoundProjection:
    budget: int
    rows: int
    distinct_experts: float  # a layer, all ranks
    weight_bytes: float  # read a round on one GPU, drafter included
    weights_ms: float
    attention_ms: float
    collectives_ms: float
    drafter_ms: float
    machinery_ms: float
    tau: float
    latency_ms: float = 0.0  # what the layers' kernel latencies add where their bytes take less

    @property
    def round_ms(self) -> float:
        return (self.weights_ms + self.attention_ms + self.latency_ms + self.collectives_ms + self.drafter_ms
                + self.machinery_ms)

    def tokens_per_s(self, slots: int = 1) -> float:
        return slots * self.tau / self.round_ms * 1e3


@dataclass
class CostModel:
    host: Host
    context: int
    slots: int = 1
    acceptance: Acceptance = field(default_factory=Acceptance)
    routing: RoutingSharing = field(default_factory=RoutingSharing)
    allreduce_us: float | None = None  # a user's figure per all-reduce, instead of the model's
    dtype: str = "bfloat16"
    hidden_size: int = 7168  # the all-reduced rows' width (the measured table's is Kimi's 7168)

    # ---- the inputs, each named -------------------------------------------------------
    def bandwidth(self) -> float:
        h200 = PROFILES["h200"]
        return self.host.profile.memory_bandwidth.value * (M.H200_COPY_BANDWIDTH / h200.memory_bandwidth.value)

    def gemm_rate(self) -> float:
        h200 = PROFILES["h200"]
        return self.host.profile.bf16_dense_flops.value * (M.H200_GEMM_FLOPS / h200.bf16_dense_flops.value)

    def inputs(self) -> list[Input]:
        p, h200 = self.host.profile, PROFILES["h200"]
        out = [
            Input("memory bandwidth", p.memory_bandwidth.value / 1e9, "GB/s", p.memory_bandwidth.kind,
                  p.memory_bandwidth.source),
            Input("copy bandwidth / spec", M.H200_COPY_BANDWIDTH / h200.memory_bandwidth.value, "ratio", "measured",
                  M.KERNELS.cite() + f": device copy {M.H200_COPY_BANDWIDTH / 1e9:.0f} GB/s of the H200's spec "
                  f"{h200.memory_bandwidth.value / 1e9:.0f}"),
            Input("copy bandwidth used", self.bandwidth() / 1e9, "GB/s",
                  "measured" if p.name == "h200" else "projection",
                  "the spec times the H200's measured share of its spec"),
            Input("bf16 tensor rate", p.bf16_dense_flops.value / 1e12, "TFLOP/s", p.bf16_dense_flops.kind,
                  p.bf16_dense_flops.source),
            Input("GEMM rate used", self.gemm_rate() / 1e12, "TFLOP/s", "measured" if p.name == "h200" else "projection",
                  M.KERNELS.cite() + f": cuBLAS 8192^3 {M.H200_GEMM_FLOPS / 1e12:.0f} TFLOP/s, as a share of the spec"),
            Input("W4A16 time / byte floor", M.H200_INT4_OVER_FLOOR[64], "ratio at 64 tokens", "measured",
                  M.MOE.cite() + " (1.25 at 1 token, 1.06 at 8, 1.02 at 64)"),
            Input("attention", M.H200_VERIFY_ATTN_US[(8, 64, 32768)][0], "us, 8 heads x 64 rows x 32k, H200", "measured",
                  M.KERNELS.cite() + "; scaled by the spec bandwidth or tensor-rate ratio"
                  + ("" if p.name == "h200" else f" (x{self._attn_scale('memory'):.2f} or x{self._attn_scale('compute'):.2f})")),
            Input("all-reduce", self.allreduce_call_us(65), f"us, 65 x {self.hidden_size} bf16",
                  "user" if self.allreduce_us is not None else
                  ("measured" if self.host.interconnect == "nvlink" else "projection"),
                  self._allreduce_source()),
            Input("a layer's latency floor", M.H200_LAYER_FLOOR_US, "us a layer", "measured",
                  M.ENGINE_DEMO.cite() + f": native AR {M.H200_DEMO_AR_TOKENS_PER_S} tokens/s over the demo "
                  f"target's {M.DEMO_TARGET_LAYERS} layers; a round's layers take at least this"),
            Input("round machinery", M.H200_ROUND_MACHINERY_US, "us a round", "measured",
                  M.ENGINE_DEMO.cite() + ": top-K + tree build 41.4, commit 23.5, host 22.5 us"),
            Input("acceptance at budget 8", self.acceptance.at_budget_8, "tokens a round", "user"
                  if self.acceptance.source != ZLAB_SOURCE else "measured (published)", self.acceptance.source
                  + "; other budgets by the demo pair's tau curve, " + M.ENGINE_DEMO.cite()),
            Input("routing sharing", self.routing.ratio(65), "distinct / random at 65 tokens", self.routing.kind,
                  self.routing.source),
        ]
        return out

    def _allreduce_source(self) -> str:
        if self.allreduce_us is not None:
            return "--allreduce-us"
        if self.host.interconnect == "nvlink":
            return (M.COLLECTIVES.cite() + "; 2 GPUs, so a lower bound for more (inside the engine a collective "
                    f"averaged {M.H200X2_ENGINE_COLLECTIVE_US:.0f} us, {M.ENGINE_SPLIT.cite()})")
        return (f"PCIe estimate (no PCIe measurement exists): the measured NVLink floor "
                f"{M.H200X2_ALLREDUCE_US[1]} us ({M.COLLECTIVES.cite()}), plus NCCL's PCI ring hop latency "
                f"({M.NCCL_PCI_RING_HOP_US['LL']} us LL at a quarter of the link, {M.NCCL_PCI_RING_HOP_US['Simple']} us "
                f"Simple, the faster; "
                f"{M.NCCL_TUNING.cite()}) for each hop past two ranks, plus 2(N-1)/N of the payload over "
                f"{self.host.profile.link_bandwidth.source}"
                + (f", halved with peer-to-peer off" if not self.host.p2p else ""))

    # ---- the parts ---------------------------------------------------------------------
    def _attn_scale(self, bound: str) -> float:
        h200, p = PROFILES["h200"], self.host.profile
        if bound == "memory":
            return h200.memory_bandwidth.value / p.memory_bandwidth.value
        return h200.bf16_dense_flops.value / p.bf16_dense_flops.value

    def attention_us(self, heads: int, rows: int, prefix: int) -> float:
        """One layer's verify_attn on this device: the H200's table, interpolated in heads,
        rows and log prefix, scaled by the spec ratio of the shape's bound."""

        def at(h: int) -> tuple[float, str]:
            by_rows: dict[float, float] = {}
            kinds: dict[int, str] = {}
            for r in (1, 16, 64, 256):
                pts = {float(pre): M.H200_VERIFY_ATTN_US[(h, r, pre)][0] for pre in (1024, 8192, 32768, 131072)}
                by_rows[float(r)] = interpolate(pts, prefix, log=True)
                kinds[r] = M.H200_VERIFY_ATTN_US[(h, r, 32768)][1]
            nearest = min(kinds, key=lambda r: abs(math.log2(r) - math.log2(max(rows, 1))))
            return interpolate(by_rows, rows), kinds[nearest]

        t8, k8 = at(8)
        t64, k64 = at(64)
        t = interpolate({8.0: t8, 64.0: t64}, heads)
        kind = k8 if heads <= 36 else k64
        return t * (1.0 if self.host.profile.name == "h200" else self._attn_scale(kind))

    def allreduce_call_us(self, rows: int) -> float:
        if self.allreduce_us is not None:
            return self.allreduce_us
        n = self.host.gpus
        if n == 1:
            return 0.0
        if self.host.interconnect == "nvlink":  # the table's rows are 7168 wide: compare bytes
            return interpolate({float(k): v for k, v in M.H200X2_ALLREDUCE_US.items()}, rows * self.hidden_size / 7168)
        payload = rows * self.hidden_size * 2  # the hidden state, bf16
        return self._pcie_us(steps=2 * (n - 1), traffic=2 * (n - 1) / n * payload)

    def gather_call_us(self, payload: int) -> float:
        n = self.host.gpus
        if n == 1:
            return 0.0
        if self.host.interconnect == "nvlink" or self.allreduce_us is not None:
            return M.H200X2_SMALL_GATHER_US
        return self._pcie_us(steps=n - 1, traffic=(n - 1) * payload)

    def _pcie_us(self, steps: int, traffic: float) -> float:
        """NCCL's ring over PCIe: the protocol (LL or Simple) its model finds faster."""
        link = self.host.profile.link_bandwidth.value * (1.0 if self.host.p2p else P2P_OFF_SHARE)
        return min(M.H200X2_ALLREDUCE_US[1] + max(0, steps - 2) * M.NCCL_PCI_RING_HOP_US[p]
                   + traffic / (link * M.NCCL_RING_BANDWIDTH_SHARE[p]) * 1e6 for p in M.NCCL_PCI_RING_HOP_US)

    # ---- a round -----------------------------------------------------------------------
    def project(self, cfg: TargetConfig, d: DrafterConfig | None, weights: WeightParts, drafter_bytes: int,
                budget: int) -> RoundProjection:
        n, S = self.host.gpus, self.slots
        el = DTYPE_BYTES[self.dtype]
        ddtree = budget > 0 and d is not None
        rows_per_slot = budget + 1 if ddtree else 1
        rows = S * rows_per_slot
        E, k = cfg.n_routed_experts, cfg.num_experts_per_tok
        distinct = random_distinct_experts(E, k, rows) * self.routing.ratio(rows) if weights.moe_layers else 0.0
        bw = self.bandwidth()
        expert_bytes = distinct / n * weights.expert_bytes * weights.moe_layers
        int4_ratio = interpolate({float(x): v for x, v in M.H200_INT4_OVER_FLOOR.items()}, rows)
        expert_ms = expert_bytes / bw * int4_ratio * 1e3
        other = sum(v for p, v in weights.bytes.items() if p not in ("routed_experts", "embedding", "drafter"))
        other_ms = max(other / bw, 2.0 * rows * other / el / self.gemm_rate()) * 1e3
        heads = cfg.num_attention_heads // n
        attention_ms = cfg.num_hidden_layers * self.attention_us(heads, rows_per_slot, self.context) * S / 1e3
        collectives_us = 2 * cfg.num_hidden_layers * self.allreduce_call_us(rows)
        if n > 1:
            collectives_us += self.gather_call_us(rows * 8)  # the merged argmax: (value, id) a row
            if ddtree:
                collectives_us += self.gather_call_us(S * (d.block_size - 1) * (budget * 8 + 4))  # top-K + lse
        drafter_ms = 0.0
        read = expert_bytes + other
        if ddtree:
            kv = 2 * d.num_hidden_layers * S * self.context * d.num_key_value_heads * d.head_dim * el
            drafter_read = drafter_bytes + weights.bytes["lm_head"] + kv
            drafter_ms = max(drafter_read / bw * 1e3, d.num_hidden_layers * M.H200_LAYER_FLOOR_US / 1e3)
            read += drafter_read
        machinery_ms = M.H200_ROUND_MACHINERY_US / 1e3 if ddtree else 0.0
        tau = self.acceptance.tau(budget, d.block_size) if ddtree else 1.0
        floor_ms = cfg.num_hidden_layers * M.H200_LAYER_FLOOR_US / 1e3
        latency_ms = max(0.0, floor_ms - (expert_ms + other_ms + attention_ms))
        return RoundProjection(budget, rows, distinct, read, expert_ms + other_ms, attention_ms,
                               collectives_us / 1e3, drafter_ms, machinery_ms, tau, latency_ms)
