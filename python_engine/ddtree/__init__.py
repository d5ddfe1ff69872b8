"""The DDTree algorithms, defined once (specified in docs/ddtree.md): per-depth top-K, the
best-first tree build, visibility masks, the accept walk and cache compaction. numpy only,
so the native tests' bundles and the torch engine share one definition."""

from python_engine.ddtree.accept import accept_greedy, accept_walk
from python_engine.ddtree.batch import build_trees, pad_trees
from python_engine.ddtree.compaction import compact_rows, compaction_indices
from python_engine.ddtree.topk import topk_logprobs
from python_engine.ddtree.tree import Tree, build_tree
from python_engine.ddtree.visibility import visibility_dense, visibility_packed

__all__ = [
    "Tree",
    "accept_greedy",
    "accept_walk",
    "build_tree",
    "build_trees",
    "compact_rows",
    "compaction_indices",
    "pad_trees",
    "topk_logprobs",
    "visibility_dense",
    "visibility_packed",
]
