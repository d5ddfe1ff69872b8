"""Reference of the verify pass's MLA attention (absorbed form), in float64.

One request: T = 1 + n query tokens (the tree's root and nodes) x H heads. Every head of
every token attends to the latent cache (one shared latent "head"):

    score[t, h, j] = scale * (q_lat[t, h] . kv[j, :R] + q_pe[t, h] . kv[j, R:])
    out[t, h]      = sum_j softmax_j(score[t, h, :]) * kv[j, :R]

over keys j in [0, prefix + T): the whole prefix, plus the tree's own entries
kv[prefix + i] (i = 0..n) where token t sees node i iff vis[t, i] (i is t or an ancestor of
t). R = kv_lora_rank (512 for DeepSeek-V3/Kimi), the last D_ROPE (64) columns are k_pe.
Also returns lse[t, h] = log(sum_j exp(score)), natural log.

This is the oracle the CUDA kernel (csrc/kernels/verify_attn*) is tested against:
`verify_attn_ref` (numpy) for the committed small cases, `verify_attn_ref_torch` (float64
on whatever device the tensors live on) for the long prefixes generated on the GPU.
"""

from __future__ import annotations

import numpy as np

KV_LORA_RANK = 512  # latent width R: also the value width
ROPE_DIM = 64  # rope part of queries and keys
QK_DIM = KV_LORA_RANK + ROPE_DIM  # 576: a latent cache row


def unpack_vis(vis_packed: np.ndarray, tree_len: int) -> np.ndarray:
    """bool [T, tree_len] from uint32 rows (bit j%32 of word j//32)."""
    vis_packed = np.asarray(vis_packed, dtype=np.uint32)
    bits = (vis_packed[..., :, None] >> np.arange(32, dtype=np.uint32)) & np.uint32(1)
    dense = bits.reshape(*vis_packed.shape[:-1], -1).astype(bool)
    return dense[..., :tree_len]


def check_tree_mask(vis: np.ndarray) -> None:
    """A valid tree mask: row t sees itself and only earlier entries, and its visible set is
    its parent's plus itself (the parent being the latest visible earlier entry)."""
    t_len = vis.shape[0]
    if vis.shape != (t_len, t_len):
        raise ValueError(f"vis must be [T, T], got {vis.shape}")
    if not vis[0, 0] or vis[0, 1:].any():
        raise ValueError("row 0 must see only the root")
    for t in range(1, t_len):
        seen = np.flatnonzero(vis[t, :t])
        if not vis[t, t] or vis[t, t + 1 :].any() or seen.size == 0 or seen[0] != 0:
            raise ValueError(f"row {t} is not an ancestor row")
        parent = seen[-1]
        if not np.array_equal(vis[t, :t], vis[parent, :t]):
            raise ValueError(f"row {t} differs from its parent's row {parent}")


def verify_attn_ref(q_lat, q_pe, kv, prefix: int, vis, scale: float):
    """One request in float64.

    q_lat [T, H, R], q_pe [T, H, rope], kv [>= prefix + T, R + rope] (rows past prefix + T
    are ignored; R = 512 and rope = 64 in the models, any widths work here), vis bool [T, T]
    (dense) or uint32 [T, words] (packed).
    Returns (out float64 [T, H, R], lse float64 [T, H]).
    """
    q_lat = np.asarray(q_lat, dtype=np.float64)
    q_pe = np.asarray(q_pe, dtype=np.float64)
    t_len, heads, rank = q_lat.shape
    if q_pe.shape[:2] != (t_len, heads):
        raise ValueError(f"q_pe must be [{t_len}, {heads}, rope], got {q_pe.shape}")
    vis = np.asarray(vis)
    if vis.dtype != bool:
        vis = unpack_vis(vis, t_len)
    keys = np.asarray(kv[: prefix + t_len], dtype=np.float64)
    if keys.shape != (prefix + t_len, rank + q_pe.shape[2]):
        raise ValueError(f"kv must have {prefix + t_len} rows of {rank + q_pe.shape[2]}, got {keys.shape}")
    scores = np.einsum("thr,jr->thj", q_lat, keys[:, :rank]) + np.einsum("thr,jr->thj", q_pe, keys[:, rank:])
    scores *= scale
    visible = np.concatenate([np.ones((t_len, prefix), dtype=bool), vis], axis=1)  # [T, L]
    scores = np.where(visible[:, None, :], scores, -np.inf)
    top = scores.max(axis=2, keepdims=True)
    weights = np.exp(scores - top)
    total = weights.sum(axis=2, keepdims=True)
    out = np.einsum("thj,jr->thr", weights / total, keys[:, :rank])
    lse = (top + np.log(total))[..., 0]
    return out, lse


def verify_attn_ref_torch(q_lat, q_pe, kv, prefix: int, vis_dense, scale: float, row_chunk: int = 2048):
    """verify_attn_ref in torch float64 on the tensors' device, chunked over query rows so a
    131072-key prefix with thousands of rows fits. vis_dense: bool [T, T] tensor."""
    import torch

    t_len, heads, rank = q_lat.shape
    keys = kv[: prefix + t_len].to(torch.float64)
    k_lat, k_pe = keys[:, :rank], keys[:, rank:]
    q_lat = q_lat.to(torch.float64).reshape(t_len * heads, rank)
    q_pe = q_pe.to(torch.float64).reshape(t_len * heads, -1)
    visible = torch.cat(
        [torch.ones(t_len, prefix, dtype=torch.bool, device=kv.device), vis_dense.to(kv.device)], dim=1
    )
    out = torch.empty(t_len * heads, rank, dtype=torch.float64, device=kv.device)
    lse = torch.empty(t_len * heads, dtype=torch.float64, device=kv.device)
    for r0 in range(0, t_len * heads, row_chunk):
        r1 = min(r0 + row_chunk, t_len * heads)
        s = (q_lat[r0:r1] @ k_lat.T + q_pe[r0:r1] @ k_pe.T) * scale
        rows = torch.arange(r0, r1, device=kv.device) // heads  # token of each query row
        s = s.masked_fill(~visible[rows], float("-inf"))
        lse[r0:r1] = torch.logsumexp(s, dim=1)
        out[r0:r1] = torch.softmax(s, dim=1) @ k_lat
    return out.reshape(t_len, heads, rank), lse.reshape(t_len, heads)
