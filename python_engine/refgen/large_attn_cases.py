"""Large verify-attention cases, generated at test time on the GPU machine and never
committed: long prefixes (2048, 32768, 131072 keys), 8/16/64 heads, n = 1/8/64/256,
random valid tree masks, some batches with per-request prefixes. Inputs are drawn from a
logged seed as bf16; the reference is verify_attn_ref_torch in float64 on the GPU.

One KDTR file per case, in the schema of refs/verify_attn.kdtr with a single case `v0.*`
(plus `seed`), read by csrc/tests/test_verify_attn.cu through $KDTREE_LARGE_ATTN_DIR.

    python3 -m python_engine.refgen.large_attn_cases OUT_DIR [--seed S] [--only NAME...]
"""

from __future__ import annotations

import argparse
import secrets
import sys
import time
from pathlib import Path

import numpy as np

from python_engine.kdtr import write_kdtr
from python_engine.refgen.kernel_refs import SOFTMAX_SCALE, random_tree_parents, tree_vis
from python_engine.verify_attn_ref import KV_LORA_RANK, QK_DIM, ROPE_DIM, unpack_vis, verify_attn_ref_torch

# (name, heads, n, prefixes per request)
CASES = [
    ("p2048_h8_n1_b2", 8, 1, [2048, 1500]),
    ("p2048_h16_n64", 16, 64, [2048]),
    ("p2048_h64_n256", 64, 256, [2048]),
    ("p32768_h64_n64", 64, 64, [32768]),  # the benchmark's shape
    ("p32768_h8_n256", 8, 256, [32768]),
    ("p32768_h16_n8_b3", 16, 8, [32768, 100, 20000]),
    ("p131072_h8_n1", 8, 1, [131072]),
    ("p131072_h64_n8", 64, 8, [131072]),
    ("p131072_h16_n64", 16, 64, [131072]),
    ("p131072_h64_n256", 64, 256, [131072]),
    # decode shapes (T * H <= 32 query rows): the decode kernel, split over every SM
    ("p32768_h8_n1_b3", 8, 1, [32768, 16000, 0]),
    ("p65536_h16_n1", 16, 1, [65536]),
    ("p8192_h1_n31", 1, 31, [8192]),
]


def make_case(torch, gen: np.random.Generator, tgen, heads: int, n: int, prefixes: list[int], device: str):
    b, t_len = len(prefixes), n + 1
    rows = max(prefixes) + t_len
    words = (t_len + 31) // 32

    def rand_bf16(*shape):
        return torch.randn(*shape, generator=tgen, device=device, dtype=torch.float32).to(torch.bfloat16)

    q_lat = rand_bf16(b, t_len, heads, KV_LORA_RANK)
    q_pe = rand_bf16(b, t_len, heads, ROPE_DIM)
    kv = rand_bf16(b, rows, QK_DIM)
    vis = np.stack([tree_vis(random_tree_parents(gen, n)) for _ in range(b)]).reshape(b, t_len, words)
    out = torch.empty(b, t_len, heads, KV_LORA_RANK, dtype=torch.float32, device=device)
    lse = torch.empty(b, t_len, heads, dtype=torch.float32, device=device)
    for r in range(b):
        dense = torch.from_numpy(unpack_vis(vis[r], t_len)).to(device)
        o, l = verify_attn_ref_torch(q_lat[r], q_pe[r], kv[r], prefixes[r], dense, float(SOFTMAX_SCALE))
        out[r], lse[r] = o.to(torch.float32), l.to(torch.float32)
    return {
        "v0.q_lat": q_lat.cpu(), "v0.q_pe": q_pe.cpu(), "v0.kv": kv.cpu(),
        "v0.prefix": np.array(prefixes, np.int32), "v0.vis": vis,
        "v0.scale": np.array([SOFTMAX_SCALE], np.float32),
        "v0.out": out.cpu().numpy(), "v0.lse": lse.cpu().numpy(),
        "num_cases": np.array([1], np.int64),
    }


def write_large_cases(out_dir: Path, seed: int, only: list[str] | None = None, device: str | None = None) -> list[Path]:
    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, (name, heads, n, prefixes) in enumerate(CASES):
        if only and name not in only:
            continue
        case_seed = seed * 1000 + i  # each case reproducible on its own
        gen = np.random.default_rng(case_seed)
        tgen = torch.Generator(device=device).manual_seed(case_seed)
        start = time.perf_counter()
        tensors = make_case(torch, gen, tgen, heads, n, prefixes, device)
        tensors["seed"] = np.array([case_seed], np.int64)
        path = write_kdtr(out_dir / f"{i:02d}_{name}.kdtr", tensors)
        print(f"  {path.name}: {path.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - start:.1f} s",
              file=sys.stderr)
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--seed", type=int, default=None, help="default: fresh, printed")
    ap.add_argument("--only", nargs="*", default=None, help="case names to write (default: all)")
    ap.add_argument("--device", default=None, help="torch device for the float64 reference (default: cuda)")
    args = ap.parse_args(argv)
    seed = secrets.randbits(31) if args.seed is None else args.seed
    print(f"large attention cases: seed {seed} -> {args.out_dir}", file=sys.stderr)
    write_large_cases(args.out_dir, seed, args.only, args.device)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
