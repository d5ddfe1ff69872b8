"""DeepSeek-V3's auxiliary-loss-free load balancing: after each step, every MoE layer's
e_score_correction_bias moves by `rate` toward experts that got fewer tokens than average
(b_e += rate * sign(mean_load - load_e)). The bias only steers which experts are chosen,
not their weights, so the checkpoint's nonzero bias exercises the engine's router path."""

from __future__ import annotations

import torch

from python_engine.train.target_model import routers


class ExpertLoadBalancer:
    def __init__(self, model, rate: float):
        self.rate = rate
        self.routers = routers(model)
        self.loads = [torch.zeros_like(r.e_score_correction_bias, dtype=torch.float32) for r in self.routers]
        self._hooks = [r.register_forward_hook(self._counter(i)) for i, r in enumerate(self.routers)]
        self.enabled = True

    def _counter(self, i: int):
        def hook(module, args, output):
            if self.enabled and module.training:
                # transformers 5.x returns (router_logits, topk_weights, topk_indices); take the
                # integer tensor rather than trusting the position across versions
                indices = next(o for o in output if torch.is_tensor(o) and not o.is_floating_point())
                load = self.loads[i]
                load += torch.bincount(indices.reshape(-1), minlength=load.numel()).float()
        return hook

    @torch.no_grad()
    def step(self) -> torch.Tensor | None:
        """Update the biases from the loads counted since the last step; returns the worst
        layer's max/mean load ratio as a device tensor (1.0 = perfectly balanced; no sync)."""
        worst = None
        for router, load in zip(self.routers, self.loads):
            mean = load.mean().clamp_min(1e-9)
            router.e_score_correction_bias += self.rate * torch.sign(mean - load) * (load.sum() > 0)
            ratio = load.max() / mean
            worst = ratio if worst is None else torch.maximum(worst, ratio)
            load.zero_()
        return worst

    def remove(self) -> None:
        for h in self._hooks:
            h.remove()
