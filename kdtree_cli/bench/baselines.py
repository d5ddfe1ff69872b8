"""What a user would write instead of each kernel, timed on the same GPU in the same run.

attention   torch's two GEMMs + masked softmax: s = (q @ kv.T).float() * scale, -inf off the
            tree's ancestors in the last T columns, softmax(s).bf16() @ kv[:, :512]; and the two
            GEMMs alone at the same shapes (cuBLAS through torch.matmul: a ceiling for the
            compute-bound shapes). Each is timed twice: with the L = prefix + T keys as they are,
            and with the keys padded to a multiple of KEY_PAD (zero rows whose scores are -inf, so
            the result is the same): an odd L gives the probabilities an unaligned row stride,
            which keeps cuBLAS off its fastest kernels. The faster form is the baseline. SDPA is
            not the baseline: with 576-d heads and a mask it falls back to its math path.
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
from . import timing
from .timing import copies_past_l2

SOFTMAX_SCALE = 1.0 / math.sqrt(192.0)  # as bench_kernels: 1/sqrt(qk_nope + qk_rope)
KEY_PAD = 8  # keys a multiple of 8: 16-byte rows of bf16 probabilities, what cuBLAS's aligned kernels need


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
    """What a user writes: q [..., M, 576] and kv [..., L+T, 576] bf16 (leading dims: the
    batch), bias [M, T] (0 / -inf) over the tree's own keys; returns [..., M, 512] bf16."""
    import torch

    s = (q @ kv.transpose(-1, -2)).float() * scale
    s[..., prefix:] += bias
    p = torch.softmax(s, dim=-1).to(q.dtype)
    return p @ kv[..., :512]


def padded_keys(keys: int, multiple: int = KEY_PAD) -> int:
    """The key count rounded up to `multiple`."""
    return -(-keys // multiple) * multiple


def pad_keys(kv, bias, multiple: int = KEY_PAD):
    """(kv, bias) with the keys padded to a multiple of `multiple`: zero rows appended to kv
    [L, 576], -inf columns appended to the tree bias [M, T] (it covers the last T + pad
    columns), so that two_gemm_attention gives the same result on either pair."""
    import torch

    keys = kv.shape[0]
    pad = padded_keys(keys, multiple) - keys
    if pad == 0:
        return kv, bias
    kv_p = torch.cat([kv, kv.new_zeros(pad, kv.shape[1])])
    bias_p = torch.cat([bias, bias.new_full((bias.shape[0], pad), float("-inf"))], dim=1)
    return kv_p, bias_p


def best_torch_form(base: dict, unpadded: str, padded: str) -> tuple[float | None, str | None]:
    """The faster of a baseline's two forms: (ms, "unpadded" | "padded"); the unpadded one when
    the padded one was not timed (or ties)."""
    a, b = base.get(unpadded), base.get(padded)
    if a is None and b is None:
        return None, None
    if b is None or (a is not None and a <= b):
        return a, "unpadded"
    return b, "padded"


def torch_attention(case: AttnCase, reps: int, device: str = "cuda") -> dict:
    """torch_ms (two GEMMs + masked softmax) and cublas_ms (the two GEMMs alone) on the keys as
    they are; torch_padded_ms and cublas_padded_ms on the keys padded to KEY_PAD (None when the
    key count already is a multiple: the same computation)."""
    import torch

    dev, bf16 = device, torch.bfloat16
    batch = case.batch
    t_len, keys = case.n + 1, case.prefix + case.n + 1
    rows = t_len * case.heads
    keys_p = padded_keys(keys)
    g = torch.Generator(device=dev).manual_seed(13)
    lead = (batch,) if batch > 1 else ()  # one request: plain GEMMs, several: batched ones
    q = torch.randn(*lead, rows, 576, device=dev, dtype=bf16, generator=g)
    sets = copies_past_l2(batch * keys_p * 576 * 2.0)
    # each set holds the padded rows; its first `keys` rows are the unpadded cache
    kvs = [torch.randn(*lead, keys_p, 576, device=dev, dtype=bf16, generator=g) for _ in range(sets)]
    for kv in kvs:
        kv[..., keys:, :] = 0
    # rows are (token t, head h) -> m = t * H + h, as verify_attn lays them out
    bias = torch.from_numpy(ancestor_bias(t_len)).to(dev).repeat_interleave(case.heads, dim=0)
    _, bias_p = pad_keys(kvs[0].reshape(-1, keys_p, 576)[0, :keys], bias)
    prefix = case.prefix

    def attention(length: int, tree_bias):
        return lambda i: two_gemm_attention(q, kvs[i % sets][..., :length, :], tree_bias, prefix)

    # fixed probabilities of each width, each its own contiguous tensor (a view of a wider one
    # would give the unpadded form the padded row stride)
    p_fixed = {n: torch.rand(*lead, rows, n, device=dev, dtype=bf16, generator=g) for n in {keys, keys_p}}

    def gemms(length: int):
        def run(i: int):
            kv = kvs[i % sets][..., :length, :]
            return q @ kv.transpose(-1, -2), p_fixed[length] @ kv[..., :512]
        return run

    out = {"torch_padded_ms": None, "cublas_padded_ms": None, "padded_keys": keys_p}
    with torch.inference_mode():
        out["torch_ms"] = timing.time_cuda(attention(keys, bias), reps).ms
        out["cublas_ms"] = timing.time_cuda(gemms(keys), reps).ms
        if keys_p != keys:
            out["torch_padded_ms"] = timing.time_cuda(attention(keys_p, bias_p), reps).ms
            out["cublas_padded_ms"] = timing.time_cuda(gemms(keys_p), reps).ms
    del q, kvs, bias, bias_p, p_fixed
    if dev == "cuda":
        torch.cuda.empty_cache()
    return out


def torch_topk(case: TopkCase, reps: int) -> dict:
    import torch

    g = torch.Generator(device="cuda").manual_seed(17)
    x = torch.randn(case.rows, case.vocab, device="cuda", generator=g) * 2.5
    out = {}
    with torch.inference_mode():
        out["torch_f32_ms"] = timing.time_cuda(lambda i: torch.topk(torch.log_softmax(x, dim=-1), case.k), reps).ms
        out["torch_f64_ms"] = timing.time_cuda(lambda i: torch.topk(torch.log_softmax(x.double(), dim=-1), case.k),
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
