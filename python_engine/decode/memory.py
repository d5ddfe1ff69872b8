"""How much memory one decode round of the torch engine takes, so that a node budget or a
block size that cannot fit is refused before anything is allocated, with the limit
stated, instead of a 20 GB allocation and a traceback.

The estimate counts the tensors whose size grows with the budget, the block size or the
context, at their peak inside a round (the verify and the draft run one after the other,
so the larger of the two counts, on top of the latent cache):

- verify, T = tree nodes + root over S = context + T columns: the visibility masks (a
  numpy bool T x T, a bool T x S and a float32 T x S additive mask), one layer's
  attention scores (heads x T x S, three alive at a time: two matmul products and their
  sum, or the masked scores, their float32 softmax and its cast back), the feed-forward
  activations and the logits (T x vocab, in the dtype and in float32);
- draft, B = block size: the drafter's attention (heads x B x (context + B), as above),
  its logits (B x vocab: dtype, float32 and numpy copies, and the three float64 arrays
  of the top-K's log-softmax);
- the latent cache: layers x capacity x latent width.

Weights and the allocator's slack are not counted: the check leaves SAFETY of the free
memory for them. tests/decode/test_memory_limits.py holds the estimate against the peak
memory measured on a CPU run.
"""

from __future__ import annotations

from dataclasses import dataclass

from python_engine.errors import KdtreeError
from python_engine.model.config import TargetConfig

SAFETY = 0.8  # share of the free memory a round may plan to use


@dataclass(frozen=True)
class RoundMemory:
    verify: int
    draft: int
    cache: int

    @property
    def peak(self) -> int:
        return self.cache + max(self.verify, self.draft)


def tree_nodes(budget: int, depth: int, vocab: int) -> int:
    """The most nodes a tree can have: the budget, or every path of length <= depth over
    the top-K tokens (K = min(budget, vocab)) when that is fewer."""
    k = min(budget, vocab)
    total, level = 0, 1
    for _ in range(depth):
        level *= k
        total += level
        if total >= budget:
            return budget
    return total


def _attention(heads: int, rows: int, cols: int, elt: int) -> int:
    """Peak bytes of one attention's scores: three [heads, rows, cols] tensors alive at once,
    in the model's dtype, or (after the float32 mask and softmax) two in float32 and one
    in the dtype."""
    return heads * rows * cols * max(3 * elt, 8 + elt)


def round_memory(cfg: TargetConfig, draft_heads: int, budget: int, block_size: int, context: int,
                 capacity: int, elt: int) -> RoundMemory:
    """cfg: the target's; draft_heads: the drafter's attention heads (0: AR, no draft);
    context: cache rows before a round, at most; capacity: the cache's rows; elt: bytes
    per element."""
    V = cfg.vocab_size
    T = 1 + (tree_nodes(budget, block_size - 1, V) if draft_heads else 0)
    S = context + T
    ffn_width = max(cfg.intermediate_size, cfg.moe_intermediate_size * (cfg.num_experts_per_tok + cfg.n_shared_experts))
    verify = (T * T + T * S * 5
              + _attention(cfg.num_attention_heads, T, S, elt)
              + 3 * T * ffn_width * elt
              + T * V * (elt + 4))
    draft = 0
    if draft_heads:
        B = block_size
        draft = (_attention(draft_heads, B, context + B, elt)
                 + B * V * (elt + 4 + 4 + 3 * 8)
                 + B * min(budget, V) * 12)
    cache = cfg.num_hidden_layers * capacity * cfg.latent_dim * elt
    return RoundMemory(verify, draft, cache)


def available_bytes(device) -> int | None:
    """Free memory on the device: the GPU's free memory, or MemAvailable on Linux for the
    CPU (None when it cannot be told)."""
    if device.type == "cuda":
        import torch

        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.0f} MB"


def largest_fitting(fits, lo: int, hi: int) -> int:
    """The largest x in lo..hi with fits(x) (fits is monotone), or lo - 1 if none."""
    if not fits(lo):
        return lo - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def check_round_fits(cfg: TargetConfig, draft_heads: int, *, budget: int, block_size: int, context: int,
                     capacity: int, elt: int, device, available: int | None = None) -> None:
    """KdtreeError naming --budget or --block-size, and the largest that fits, when one
    round would not fit in the device's free memory (draft_heads 0: an AR run)."""
    free = available_bytes(device) if available is None else available
    if free is None:
        return
    limit = SAFETY * free

    def need(b: int, bs: int) -> RoundMemory:
        return round_memory(cfg, draft_heads, b, bs, context, capacity, elt)

    mem = need(budget, block_size)
    if mem.peak <= limit:
        return
    where = f"{device.type}" + (f":{device.index}" if device.index is not None else "")
    said = (f"one decode round would need about {gb(mem.peak)}, and {where} has {gb(free)} free "
            f"(a round may plan on {SAFETY:.0%} of it)")
    if draft_heads and mem.draft > mem.verify:
        best = largest_fitting(lambda bs: need(budget, bs).peak <= limit, 1, block_size)
        raise KdtreeError(f"--block-size {block_size}: {said}; the largest block size that fits is "
                          f"{best}" if best >= 1 else f"--block-size {block_size}: {said}")
    best = largest_fitting(lambda b: need(b, block_size).peak <= limit, 1, budget)
    what = f"--budget {budget}" if draft_heads else "the context"
    hint = (f"; the largest budget that fits is {best}" if draft_heads and best >= 1
            else "; use a shorter prompt or fewer --max-tokens")
    raise KdtreeError(f"{what}: {said}{hint}")
