#!/usr/bin/env python3
"""The torch reference against itself: how often its DDTree greedy output parts from its own AR
greedy output, on the native decode test's prompts (code_prompts(32, seed + offset), 128 tokens,
budget 32), in one dtype on the CPU. A float32 run should print 0; a bf16 run shows how often
batch-shape rounding alone (a verify of 33 rows vs a decode of 1) changes a greedy choice. At
each divergence it prints the float32 reference's logit gap between the two tokens (a prefill
of the shared prefix): how near a tie bf16 rounding alone can flip.

  python scripts/torch_ddtree_vs_ar.py refs/models/demo-target-int4 357993550 3 bfloat16
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from python_engine.decode.ar import ar_generate  # noqa: E402
from python_engine.decode.ddtree_loop import ddtree_generate  # noqa: E402
from python_engine.demo.code_prompts import code_prompts  # noqa: E402
from python_engine.model.drafter import load_drafter  # noqa: E402
from python_engine.model.target_loader import load_target  # noqa: E402


def main() -> None:
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    tdir, seed, off, dtn = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    dt = {"bfloat16": torch.bfloat16, "float32": torch.float32}[dtn]
    torch.set_num_threads(1)
    t = load_target(tdir, "cpu", dt)
    d = load_drafter("refs/models/demo-drafter", t)
    ref = load_target(tdir, "cpu", torch.float32)
    n = 0
    for i, p in enumerate(code_prompts(32, seed + off)):
        a = ar_generate(t, p, 128).tokens
        g = ddtree_generate(t, d, p, 128, 32).tokens
        if a != g:
            j = next((k for k, (x, y) in enumerate(zip(a, g)) if x != y), None)
            n += 1
            seq = p + a[:j]
            lg = ref.forward(seq, torch.arange(len(seq)), ref.new_cache(len(seq) + 1)).logits[-1].float()
            print(f"prompt {i} differs at {j}: {a[max(0, j - 2):j + 3]} vs {g[max(0, j - 2):j + 3]}; float32 gap "
                  f"{float(lg[a[j]] - lg[g[j]]):+.3f} (max |logit| {float(lg.abs().max()):.1f})", flush=True)
    print(f"RESULT {tdir} {dtn} seed {seed}: {n} of 32 differ", flush=True)


if __name__ == "__main__":
    main()
