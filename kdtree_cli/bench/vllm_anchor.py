"""vLLM's Triton MLA decode kernel as a same-run anchor for `kdtree bench kernels --anchor-vllm DIR`.

What vLLM runs for MLA attention where FlashMLA / CUTLASS MLA do not (sm_120 among them) is
its TRITON_MLA backend, whose kernel is `decode_attention_fwd` in
vllm/v1/attention/ops/triton_decode_attention.py (vllm/attention/ops/ in older trees). DIR is
a vLLM source tree (a checkout, or the `vllm/` package of its release); nothing of it is copied
here. A GPU machine without network gets one made beside it and carried (an ignored folder):

    pip download vllm==0.33.0 --no-deps --only-binary :all: -d /tmp/vllm-wheel
    unzip -o /tmp/vllm-wheel/vllm-0.33.0-*.whl vllm/v1/attention/ops/triton_decode_attention.py \
        'vllm-0.33.0.dist-info/licenses/LICENSE' -d build/anchor-vllm
 The file is loaded alone: of vllm it imports only `vllm.platforms.current_platform` (used
for `is_rocm()`) and `vllm.triton_utils` (`tl`, `triton`); those two names are stood in for
while it loads (current_platform.is_rocm() is torch's own answer, triton_utils gives the real
triton), and any other vllm import is refused with the name of it.

How it is called, as vLLM's TritonMLAImpl.forward_mqa (vLLM 0.33) calls it:
- the latent cache is paged: pages of `page_size` rows (vLLM's default block size, 16) of
  576 = kv_lora 512 + rope 64 bf16 values, one latent head; each request's pages in a block
  table, given in a shuffled order as an allocator hands them out;
- a verify block of T query tokens is flattened to T decode rows a request, causal: row t
  reads the request's first prefix + t + 1 keys (the block table repeated T times); the
  tree's own keys are those of a chain, so the reference it is checked against is our
  attention with a chain's mask (float32, two_gemm_attention);
- num_kv_splits by vLLM's rule (next power of two of max_seq_len // 512, at most 2 a SM);
  BLOCK_N, BLOCK_H, warps and stages are the module's own choices;
- o, lse and the split scratch are allocated once outside the timed runs (vLLM serves the
  scratch from a workspace; its two torch.zeros for o and lse are not timed).
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import types
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from python_engine.errors import KdtreeError

DECODE_MODULE_PATHS = ("vllm/v1/attention/ops/triton_decode_attention.py",
                       "vllm/attention/ops/triton_decode_attention.py")
STOOD_IN = {"vllm.platforms": {"current_platform"}, "vllm.triton_utils": {"tl", "triton"}}
KV_LORA_RANK, ROPE_DIM = 512, 64
LATENT_DIM = KV_LORA_RANK + ROPE_DIM
DEFAULT_PAGE_SIZE = 16         # vLLM's default KV block size; TRITON_MLA takes multiples of 16
MIN_KEYS_PER_SPLIT = 512       # vLLM's num_kv_splits rule: a split per 512 keys (a power of two)...
SPLITS_PER_SM = 2              # ... at most two a SM
STAGE1_KERNEL = "_fwd_grouped_kernel_stage1"  # the MLA (grouped) path's attention kernel
# Triton's switch that keeps tl.dot off wgmma on Hopper (it compiles to mma.sync instead; a
# cache-invalidating variable, so the two forms never share a cached kernel): vLLM's kernel as
# it would be built for an sm_120, which has no wgmma
NO_WGMMA_ENV = {"DISABLE_MMA_V3": "1"}


def find_decode_module(root: Path) -> Path:
    """The triton_decode_attention.py of the vLLM tree at `root` (a checkout or the folder that
    holds the `vllm` package)."""
    root = Path(root)
    for rel in DECODE_MODULE_PATHS:
        if (root / rel).is_file():
            return root / rel
    raise KdtreeError(f"--anchor-vllm {root}: no vLLM Triton decode kernel there (looked for "
                      f"{' and '.join(DECODE_MODULE_PATHS)}); give the folder that holds vLLM's `vllm/` package")


def vllm_imports(path: Path) -> dict[str, set[str]]:
    """{module: names} of the file's top-level `from vllm... import` statements."""
    tree = ast.parse(Path(path).read_text(), filename=str(path))
    out: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "vllm":
            out.setdefault(node.module, set()).update(a.name for a in node.names)
        elif isinstance(node, ast.Import) and any(a.name.split(".")[0] == "vllm" for a in node.names):
            out.setdefault(",".join(a.name for a in node.names), set()).add("*")
    return out


@contextmanager
def _stood_in_vllm():
    """sys.modules with `vllm`, `vllm.platforms` and `vllm.triton_utils` stood in for while a
    file loads; whatever was there before is put back."""
    import torch
    import triton
    import triton.language as tl

    platform = types.SimpleNamespace(is_rocm=lambda: torch.version.hip is not None,
                                     is_cuda=lambda: torch.version.hip is None)
    stand_ins = {"vllm": types.ModuleType("vllm"), "vllm.platforms": types.ModuleType("vllm.platforms"),
                 "vllm.triton_utils": types.ModuleType("vllm.triton_utils")}
    stand_ins["vllm.platforms"].current_platform = platform
    stand_ins["vllm.triton_utils"].triton = triton
    stand_ins["vllm.triton_utils"].tl = tl
    with _entries(sys.modules, stand_ins):
        yield


@contextmanager
def _entries(store, values: dict):
    """`store` (sys.modules, os.environ) with `values` set, put back as it was after."""
    saved = {k: store.get(k) for k in values}
    store.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                store.pop(k, None)
            else:
                store[k] = v


def load_decode_module(root: Path, compile_env: dict | None = None) -> types.ModuleType:
    """vLLM's triton_decode_attention.py from `root`, loaded as a module of its own (each call
    a fresh one, with its own compiled kernels). compile_env: environment its kernels are
    compiled under (time_case sets it around the call that compiles), e.g. NO_WGMMA_ENV."""
    path = find_decode_module(root)
    extra = {m: sorted(n - STOOD_IN.get(m, set())) for m, n in vllm_imports(path).items()
             if n - STOOD_IN.get(m, set())}
    if extra:
        raise KdtreeError(f"{path} imports from vllm what the anchor does not stand in for: "
                          + "; ".join(f"{m}: {', '.join(n)}" for m, n in extra.items()))
    try:
        import triton  # noqa: F401
    except ImportError as exc:
        raise KdtreeError(f"--anchor-vllm needs triton (it ships with torch's CUDA wheels): {exc}") from exc
    spec = importlib.util.spec_from_file_location(
        "kdtree_anchor_vllm_triton_decode_attention" + ("_" + "_".join(sorted(compile_env)).lower() if compile_env else ""),
        path)
    module = importlib.util.module_from_spec(spec)
    with _stood_in_vllm():
        spec.loader.exec_module(module)
    if not hasattr(module, "decode_attention_fwd"):
        raise KdtreeError(f"{path} has no decode_attention_fwd")
    module.kdtree_source = str(path)
    module.kdtree_compile_env = dict(compile_env or {})
    return module


# ---- the arguments, as TritonMLAImpl.forward_mqa builds them --------------------------------------

def num_kv_splits(max_seq_len: int, sms: int) -> int:
    """vLLM's split count: the next power of two of max_seq_len // 512 (at least 1), at most
    SPLITS_PER_SM a SM."""
    want = max(1, max_seq_len // MIN_KEYS_PER_SPLIT)
    return min(1 << (want - 1).bit_length(), sms * SPLITS_PER_SM)


def page_order(batch: int, length: int, page_size: int, generator=None):
    """A random permutation of the B * ceil(L / page_size) pages: the order an allocator hands
    them out in (int64, CPU)."""
    import torch

    return torch.randperm(batch * -(-length // page_size), generator=generator)


def page_cache(kv, page_size: int, order):
    """Our latent cache kv [B, L, 576] as vLLM's paged cache: (pages [P, page_size, 576] with
    P = B * ceil(L / page_size), block_table int32 [B, ceil(L / page_size)]). Request b's rows
    are its table's pages in order; page j of the cache (j over requests, then pages) is put at
    order[j]; rows past L in a request's last page are zero."""
    import torch

    batch, length, width = kv.shape
    per = -(-length // page_size)
    order = order.to(kv.device)
    padded = kv.new_zeros(batch, per * page_size, width)
    padded[:, :length] = kv
    pages = kv.new_empty(batch * per, page_size, width)
    pages[order] = padded.reshape(batch * per, page_size, width)
    return pages, order.reshape(batch, per).to(torch.int32)


def gather_pages(pages, block_table, length: int):
    """The rows a block table names, request by request: [B, length, 576] (what the kernel reads)."""
    batch, per = block_table.shape
    rows = pages[block_table.long().reshape(-1)].reshape(batch, per * pages.shape[1], pages.shape[2])
    return rows[:, :length]


def decode_rows(q, block_table, prefix: int):
    """A verify block as forward_mqa flattens it: q [B, T, H, 576] -> ([B*T, H, 576], the block
    table repeated T times, seq_lens: row (b, t) reads prefix + t + 1 keys)."""
    import torch

    batch, t_len = q.shape[:2]
    seq_lens = (prefix + t_len + torch.arange(1 - t_len, 1, device=q.device, dtype=torch.int32)).repeat(batch)
    return q.reshape(batch * t_len, *q.shape[2:]), block_table.repeat_interleave(t_len, dim=0), seq_lens


def chain_attention_f32(q, kv, prefix: int, scale: float):
    """Our float32 reference of what the decode rows compute: q [B, T, H, 576], kv [B, prefix +
    T, 576] -> [B, T, H, 512]: each token sees the prefix and the chain's tokens up to itself."""
    import torch

    from .baselines import two_gemm_attention

    batch, t_len, heads = q.shape[:3]
    bias = torch.from_numpy(_chain_bias(t_len)).to(q.device).repeat_interleave(heads, dim=0)
    out = two_gemm_attention(q.float().reshape(batch, t_len * heads, -1), kv[:, :prefix + t_len].float(), bias,
                             prefix, scale)
    return out.reshape(batch, t_len, heads, -1)


def _chain_bias(t_len: int):
    import numpy as np

    bias = np.full((t_len, t_len), -np.inf, np.float32)
    bias[np.tril_indices(t_len)] = 0.0
    return bias


# ---- a GPU run ---------------------------------------------------------------------------------

@dataclass
class AnchorCall:
    """Everything one decode_attention_fwd call takes, built once for a case: the flattened
    decode rows, the paged cache (one per KV set, one block table for all), o, lse and the
    split scratch."""
    q: object
    pages: list
    block_table: object
    seq_lens: object
    o: object
    lse: object
    logits: object
    splits: int
    page_size: int


def prepare_call(q, kvs: list, prefix: int, page_size: int, sms: int, order) -> AnchorCall:
    """The call for q [B, T, H, 576] over the KV sets kvs (each [B, prefix + T, 576]), paged in
    `order` (page_order), on q's device and in q's dtype."""
    import torch

    batch, t_len, heads = q.shape[:3]
    pages = []
    for kv in kvs:
        paged, table = page_cache(kv, page_size, order)
        pages.append(paged.unsqueeze(2))  # vLLM adds the one latent head: [P, page_size, 1, 576]
    rows_q, rows_table, seq_lens = decode_rows(q, table, prefix)
    splits = num_kv_splits(prefix + t_len, sms)
    rows = rows_q.shape[0]
    return AnchorCall(rows_q, pages, rows_table, seq_lens,
                      q.new_empty(rows, heads, KV_LORA_RANK), q.new_empty(rows, heads),
                      torch.empty(rows, heads, splits, KV_LORA_RANK + 1, device=q.device, dtype=torch.float32),
                      splits, page_size)


def launch(module, call: AnchorCall, i: int, scale: float) -> None:
    """vLLM's decode_attention_fwd on KV set i (mod the sets), as forward_mqa passes it: the
    cache with its latent head, its first 512 columns as the values, the page size."""
    cache = call.pages[i % len(call.pages)]
    module.decode_attention_fwd(call.q, cache, cache[..., :KV_LORA_RANK], call.o, call.lse, call.block_table,
                                call.seq_lens, call.logits, call.splits, scale, call.page_size, **_mla_kwargs(module))


def output(call: AnchorCall, batch: int) -> object:
    """The call's o as [B, T, H, 512] float32."""
    rows, heads = call.o.shape[:2]
    return call.o.float().reshape(batch, rows // batch, heads, KV_LORA_RANK)


def time_case(module, case, reps: int, sms: int, page_size: int = DEFAULT_PAGE_SIZE, scale: float | None = None,
              device: str = "cuda") -> dict:
    """vLLM's kernel on a case (AttnCase: heads, n, prefix, batch): its median ms, the split
    count, and its error against chain_attention_f32 (max |err| / max |ref|)."""
    import torch

    from . import timing
    from .baselines import SOFTMAX_SCALE

    scale = SOFTMAX_SCALE if scale is None else scale
    dev, bf16 = device, torch.bfloat16
    t_len, length = case.n + 1, case.prefix + case.n + 1
    g = torch.Generator(device=dev).manual_seed(29)
    q = torch.randn(case.batch, t_len, case.heads, LATENT_DIM, device=dev, dtype=bf16, generator=g)
    sets = timing.copies_past_l2(case.batch * length * LATENT_DIM * 2.0)
    kvs = [torch.randn(case.batch, length, LATENT_DIM, device=dev, dtype=bf16, generator=g) for _ in range(sets)]
    # one block table for every set (as one batch's pages): the sets rotate the contents
    call = prepare_call(q, kvs, case.prefix, page_size, sms,
                        page_order(case.batch, length, page_size, torch.Generator().manual_seed(31)))
    with torch.inference_mode():
        with _entries(os.environ, getattr(module, "kdtree_compile_env", {})):  # the first call compiles
            launch(module, call, 0, scale)
        want = chain_attention_f32(q, kvs[0], case.prefix, scale)
        err = float((output(call, case.batch) - want).abs().max() / want.abs().max())
        del kvs, want  # the paged copies are what the runs read
        ms = timing.time_cuda(lambda i: launch(module, call, i, scale), reps).ms
    splits = call.splits
    del q, call
    if dev == "cuda":
        torch.cuda.empty_cache()
    return {"vllm_ms": ms, "vllm_splits": splits, "vllm_page_size": page_size, "vllm_rel_err": err}


def _mla_kwargs(module) -> dict:
    """is_mla=True where the module's decode_attention_fwd takes it (vLLM >= 0.2x); older trees
    have the MLA tiles without the flag."""
    import inspect

    return {"is_mla": True} if "is_mla" in inspect.signature(module.decode_attention_fwd).parameters else {}


# ---- which instructions Triton chose ---------------------------------------------------------------

MMA_PATTERNS = {"ptx_wgmma": r"\bwgmma\.mma_async", "ptx_mma_sync": r"\bmma\.sync",
                "sass_hgmma": r"\bHGMMA\b", "sass_hmma": r"\bHMMA\b"}


def compiled_kernels(jit_fn) -> list:
    """The compiled kernels a Triton JITFunction holds (triton 3.x: device_caches; older: cache)."""
    found = []
    for entry in getattr(jit_fn, "device_caches", {}).values():
        cache = entry[0] if isinstance(entry, tuple) else entry
        found += list(cache.values()) if isinstance(cache, dict) else []
    for cache in getattr(jit_fn, "cache", {}).values():
        found += list(cache.values()) if isinstance(cache, dict) else []
    return found


def uses_wgmma(module) -> bool:
    """Whether any compiled variant of the module's stage-1 kernel has wgmma in its PTX."""
    return any(re.search(MMA_PATTERNS["ptx_wgmma"], getattr(k, "asm", {}).get("ptx", ""))
               for k in compiled_kernels(getattr(module, STAGE1_KERNEL)))


def count_mma(ptx: str, sass: str) -> dict:
    """How many wgmma / mma.sync instructions the PTX holds and HGMMA / HMMA the SASS."""
    texts = {"ptx": ptx or "", "sass": sass or ""}
    return {k: len(re.findall(p, texts[k.split("_")[0]])) for k, p in MMA_PATTERNS.items()}


def cuobjdump() -> str | None:
    """cuobjdump: on PATH, else the one triton ships (triton/backends/nvidia/bin)."""
    import shutil

    tool = shutil.which("cuobjdump")
    if tool:
        return tool
    try:
        import triton
    except ImportError:
        return None
    bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    return str(bundled) if bundled.is_file() else None


def sass_of(cubin: bytes) -> str:
    """cuobjdump -sass of a cubin ('' without a cuobjdump)."""
    tool = cuobjdump()
    if not tool or not cubin:
        return ""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        proc = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True, timeout=120)
    return proc.stdout


# The stage-1 kernel's pointer arguments and their element types for a bf16 cache (the rest of
# its non-constexpr arguments are int32 strides); its constexprs as the MLA path sets them
STAGE1_POINTERS = {"Q": "*bf16", "K_Buffer": "*bf16", "V_Buffer": "*bf16", "Req_to_tokens": "*i32",
                   "B_Seqlen": "*i32", "Att_Out": "*fp32", "k_scale": "*fp32", "v_scale": "*fp32",
                   "sm_scale": "fp32"}


def compile_offline(module, cc: int, heads: int = 8, splits: int = 64, page_size: int = DEFAULT_PAGE_SIZE,
                    env: dict | None = None) -> dict:
    """vLLM's stage-1 kernel compiled by Triton for compute capability `cc` without a GPU (its
    MLA tiles: BLOCK_DMODEL 512 + BLOCK_DPE 64, BLOCK_N 32, BLOCK_H 16, 4 warps, 2 stages, as
    _decode_grouped_att_m_fwd picks them on NVIDIA): its MMA instruction counts and shared memory.
    What an sm_120 would run, read on any machine."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = getattr(module, STAGE1_KERNEL)
    constexprs = dict(kv_group_num=heads, q_head_num=heads, BLOCK_DMODEL=KV_LORA_RANK, BLOCK_DPE=ROPE_DIM,
                      BLOCK_DV=KV_LORA_RANK, BLOCK_N=32, BLOCK_H=16, NUM_KV_SPLITS=splits, PAGE_SIZE=page_size,
                      logit_cap=0.0, Lk=LATENT_DIM, Lv=KV_LORA_RANK, IS_MLA=True)
    constexprs = {k: v for k, v in constexprs.items() if k in fn.arg_names}
    signature = {a: "constexpr" if a in constexprs else STAGE1_POINTERS.get(a, "i32") for a in fn.arg_names}
    with _entries(os.environ, env or {}):
        kernel = triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget("cuda", cc, 32),
                                options={"num_warps": 4, "num_stages": 2})
    return {"cc": cc, **count_mma(kernel.asm["ptx"], sass_of(kernel.asm["cubin"])),
            "shared_bytes": kernel.metadata.shared, "triton": triton.__version__}


def instructions(module, dump: Path | None = None) -> dict:
    """The MMA instructions of every compiled variant of vLLM's stage-1 kernel (after a run):
    counts in its PTX and SASS, its launch shape; each variant's PTX and SASS written, one
    after another, to the file `dump`."""
    out, text = [], []
    for k, kernel in enumerate(compiled_kernels(getattr(module, STAGE1_KERNEL))):
        asm = getattr(kernel, "asm", {})
        ptx, sass = asm.get("ptx", ""), sass_of(asm.get("cubin", b""))
        meta = getattr(kernel, "metadata", None)
        entry = {"variant": k, **count_mma(ptx, sass),
                 "num_warps": getattr(meta, "num_warps", None), "num_stages": getattr(meta, "num_stages", None),
                 "shared_bytes": getattr(meta, "shared", None),
                 "target": str(getattr(meta, "target", ""))}
        text += [f"// ==== variant {k}: {entry}", "// ---- PTX", ptx, "// ---- SASS (cuobjdump -sass)",
                 sass or "// (no cuobjdump)"]
        out.append(entry)
    if dump is not None and text:
        dump.parent.mkdir(parents=True, exist_ok=True)
        dump.write_text("\n".join(text))
    return {"kernel": STAGE1_KERNEL, "variants": out, "dump": None if dump is None or not text else dump.name}
