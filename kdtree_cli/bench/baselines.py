"""What a user would write instead of each kernel, timed on the same GPU in the same run.

attention   torch's two GEMMs + masked softmax: s = (q @ kv.T).float() * scale, -inf off the
            tree's ancestors in the last T columns, softmax(s).bf16() @ kv[:, :512]; and the two
            GEMMs alone at the same shapes (cuBLAS through torch.matmul: a ceiling for the
            compute-bound shapes). SDPA is not the baseline: with 576-d heads and a mask it
            falls back to its math path.
top-K       torch.topk(torch.log_softmax(x, -1), K) in float32, and with the log-softmax in
            float64 as the reference forms it.
tree build  python_engine.ddtree.build_tree (the reference heap, Python) per tree; the C++ heap
            on one core comes from bench_kernels.
"""

from __future__ import annotations

import math
import time

import numpy as np

from .suites import AttnCase, TopkCase, TreeCase
from .timing import copies_past_l2, time_cuda

SOFTMAX_SCALE = 1.0 / math.sqrt(192.0)  # as bench_kernels: 1/sqrt(qk_nope + qk_rope)


def tree_parents(t_len: int) -> list[int]:
    """The tree bench_kernels uses: node i's parent is i-1 when i is odd, else i/2."""
    return [-1] + [(i - 1) if i % 2 else i // 2 for i in range(1, t_len)]


def ancestor_bias(t_len: int):
    """[T, T] float32: 0 where column j is row i or an ancestor of it, -inf elsewhere."""
    parents = tree_parents(t_len)
    bias = np.full((t_len, t_len), -np.inf, np.float32)
    for i in range(t_len):
        a = i
        while a >= 0:
            bias[i, a] = 0.0
            a = parents[a]
    return bias


def two_gemm_attention(q, kv, bias, prefix: int, scale: float = SOFTMAX_SCALE):
    """What a user writes: q [M, 576] and kv [L+T, 576] bf16, bias [M, T] (0 / -inf) over the
    tree's own keys; returns [M, 512] bf16."""
    import torch

    s = (q @ kv.T).float() * scale
    s[:, prefix:] += bias
    p = torch.softmax(s, dim=-1).to(q.dtype)
    return p @ kv[:, :512]


def torch_attention(case: AttnCase, reps: int) -> dict:
    """torch_ms (two GEMMs + masked softmax) and cublas_ms (the two GEMMs alone)."""
    import torch

    dev, bf16 = "cuda", torch.bfloat16
    t_len, rows, keys = case.n + 1, (case.n + 1) * case.heads, case.prefix + case.n + 1
    g = torch.Generator(device=dev).manual_seed(13)
    q = torch.randn(rows, 576, device=dev, dtype=bf16, generator=g)
    sets = copies_past_l2(keys * 576 * 2.0)
    kvs = [torch.randn(keys, 576, device=dev, dtype=bf16, generator=g) for _ in range(sets)]
    # rows are (token t, head h) -> m = t * H + h, as verify_attn lays them out
    bias = torch.from_numpy(ancestor_bias(t_len)).to(dev).repeat_interleave(case.heads, dim=0)
    prefix = case.prefix

    def attention(i: int):
        return two_gemm_attention(q, kvs[i % sets], bias, prefix)

    p_fixed = torch.rand(rows, keys, device=dev, dtype=bf16, generator=g)

    def gemms(i: int):
        kv = kvs[i % sets]
        s = q @ kv.T
        return s, p_fixed @ kv[:, :512]

    out = {}
    with torch.inference_mode():
        out["torch_ms"] = time_cuda(attention, reps).ms
        out["cublas_ms"] = time_cuda(gemms, reps).ms
    del q, kvs, bias, p_fixed
    torch.cuda.empty_cache()
    return out


def torch_topk(case: TopkCase, reps: int) -> dict:
    import torch

    g = torch.Generator(device="cuda").manual_seed(17)
    x = torch.randn(case.rows, case.vocab, device="cuda", generator=g) * 2.5
    out = {}
    with torch.inference_mode():
        out["torch_f32_ms"] = time_cuda(lambda i: torch.topk(torch.log_softmax(x, dim=-1), case.k), reps).ms
        out["torch_f64_ms"] = time_cuda(lambda i: torch.topk(torch.log_softmax(x.double(), dim=-1), case.k),
                                        max(3, reps // 2)).ms
    del x
    torch.cuda.empty_cache()
    return out


def tree_inputs(case: TreeCase, rng: np.random.Generator, count: int):
    """`count` requests' (logp, tok) of the case's input kind, as bench_kernels draws them."""
    k, d = case.budget, case.depth
    out = []
    for _ in range(count):
        if case.input == "flat":
            gaps = rng.exponential(1.0, size=(d, k)).astype(np.float32) * np.float32(0.08)
            logp = (np.float32(-0.05) - np.cumsum(gaps, axis=1, dtype=np.float32)).astype(np.float32)
            tok = np.broadcast_to(np.arange(k, dtype=np.int64) * 7, (d, k)).copy()
        else:
            from python_engine.ddtree import topk_logprobs

            logits = rng.normal(0.0, 2.5, size=(d, 4096)).astype(np.float32)
            logp, tok = topk_logprobs(logits, k)
        out.append((logp, tok))
    return out


def python_tree_ms_per_tree(case: TreeCase, trees: int = 3) -> float:
    """Median milliseconds of python_engine.ddtree.build_tree on `trees` requests of the case."""
    from python_engine.ddtree import build_tree

    rng = np.random.default_rng(11)
    times = []
    for logp, tok in tree_inputs(case, rng, trees):
        t0 = time.perf_counter()
        build_tree(logp, tok, case.budget, root_token=1)
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]
