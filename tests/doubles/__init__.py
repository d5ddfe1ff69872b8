"""Test doubles, for the tests alone (the engine's packages never import them):

    oracle_drafter.py   TargetOracleDrafter: a drafter that drafts with the target itself,
                        often right, for long accepts
    router_ties.py      replays the other side of a router near-tie, to explain a divergence
                        between two bf16 forwards

The random checkpoints the tests load are python_engine/model/synthetic_checkpoint.py, which
`kdtree refs`, the agree pair and `kdtree bench gpus` use as well."""
