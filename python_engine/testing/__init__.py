"""Test doubles and generated inputs, kept out of the engine's own packages: random target
and drafter checkpoints (used by the tests and by `kdtree refs` to write refs/), and the
oracle drafter that drafts with the target itself (tests only). Nothing in the engine's
decode path imports from here.

    random_target.py    random DeepSeek-V3-format target checkpoints (tiny_config, write_random_target)
    random_drafter.py   random DFlash drafter checkpoints for a target (write_random_drafter)
    oracle_drafter.py   TargetOracleDrafter: a drafter that is often right, for long accepts
"""
