"""Decoding loops of the torch reference engine: autoregressive and DDTree, the posterior
choice rules (greedy, sampled), and the multi-request runner that emits metrics events."""
